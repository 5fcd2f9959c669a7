"""The SQL function catalogue: every function the original registers on top of its SQL engine, by family.

A function with Spark built-ins of the same meaning is a `SparkFunction`, rewritten in the SQL before Spark
sees it; the rest are `ArrowFunction`s, vectorised over Arrow arrays and registered through the same interface
as plugins' SQL functions. `catalogue` puts the families together; `calls` rewrites a parsed query's calls.
"""
