"""Dynamic tables: sets of strings that SQL transforms test membership in with
``dynamic_table_check('t', value)``.

The ``dynamic_table`` transform (`streamling.sql.dynamic_tables.transform`) owns a table and fills it; the
lookups run on Spark's executors inside a vectorised UDF (`udf`), one query per batch of distinct
values. Backends: `postgres` (a shared table, visible to every worker and to external writers) and
`memory` (a set on the driver, shipped to the workers as a broadcast variable).
"""
