"""Dynamic tables, structurally: the spec's fields, the topology checks around dynamic_table_check, and
evaluation order. No Spark, no database."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pytest

from streamling.sql.dynamic_tables.udf import membership
from streamling.topology.pipeline import load_pipeline

GEN = "{type: generator, rows: 10}"


def load(text: str):
    return load_pipeline(textwrap.dedent(text))


def errors(text: str) -> list[str]:
    pipeline, report = load(text)
    assert (pipeline is None) == (not report.is_valid)
    return report.errors


@pytest.mark.parametrize(
    ("given", "stored"),
    [("postgres", "Postgres"), ("POSTGRES", "Postgres"), ("inmemory", "InMemory"), ("In_Memory", "InMemory")],
)
def test_backend_type_is_case_insensitive(given: str, stored: str) -> None:
    pipeline, report = load(f"""
        sources:
          a: {GEN}
        transforms:
          watch: {{type: dynamic_table, backend_type: {given}, backend_entity_name: watch}}
        sinks:
          out: {{type: print, from: a}}
        """)
    assert report.errors == []
    assert pipeline is not None
    assert pipeline.nodes["watch"].spec.backend_type == stored


def test_unknown_backend_type_names_node_field_and_value() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          watch: {{type: dynamic_table, backend_type: Redis, backend_entity_name: watch}}
        sinks:
          out: {{type: print, from: a}}
        """) == [
        "transform 'watch' (type 'dynamic_table'): field 'backend_type': must be one of Postgres, InMemory "
        "(case-insensitive) (got 'Redis')"
    ]


def test_fields_are_checked() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          w1: {{type: dynamic_table, backend_type: InMemory}}
          w2: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: w2, from: a}}
          w3: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: w3, time_column: value}}
          w4: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: {"x" * 64}}}
          w5: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: w5, column: {"c" * 64}}}
        sinks:
          out: {{type: print, from: a}}
        """) == [
        "transform 'w1' (type 'dynamic_table'): missing required field 'backend_entity_name'",
        "transform 'w2' (type 'dynamic_table'): 'from' needs 'column' or 'sql' to say what fills the table",
        "transform 'w3' (type 'dynamic_table'): time_column must differ from the value column 'value'",
        "transform 'w4' (type 'dynamic_table'): field 'backend_entity_name': must be at most 63 bytes "
        f"(a Postgres identifier) (got '{'x' * 64}')",
        "transform 'w5' (type 'dynamic_table'): field 'column': must be at most 63 bytes "
        f"(a Postgres identifier) (got '{'c' * 64}')",
    ]


def test_check_of_undefined_dynamic_table() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM a WHERE dynamic_table_check('x', name)
        sinks:
          out: {{type: print, from: f}}
        """) == ["transform 'f': dynamic table 'x' is used in SQL transform but not defined in pipeline topology"]


def test_check_of_a_node_that_is_not_a_dynamic_table() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM a WHERE dynamic_table_check('a', name)
        sinks:
          out: {{type: print, from: f}}
        """) == ["transform 'f': dynamic table 'a' is used in SQL transform but not defined in pipeline topology"]


def test_sql_filled_table_must_share_the_sql_transforms_input() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
          b: {GEN}
        transforms:
          t: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: t, sql: SELECT name FROM a}}
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM b WHERE dynamic_table_check('t', name)
        sinks:
          out: {{type: print, from: f}}
          out_a: {{type: print, from: a}}
        """) == [
        "transform 'f': dynamic table 't' uses source 'a' but SQL transform uses source 'b'; a SQL transform that "
        "checks a dynamic table populated by 'sql' must read the same input, so lookups see this epoch's values"
    ]


def test_column_filled_and_external_tables_may_be_checked_from_any_source() -> None:
    pipeline, report = load(f"""
        sources:
          watchlist: {GEN}
          b: {GEN}
        transforms:
          t: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: t, from: watchlist, column: name}}
          ext: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: ext}}
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM b WHERE dynamic_table_check('t', name) OR dynamic_table_check('ext', name)
        sinks:
          out: {{type: print, from: f}}
        """)
    assert report.errors == []
    assert pipeline is not None
    assert pipeline.inputs["ext"] == []
    assert pipeline.inputs["f"] == ["b"]  # ordering only: the tables are not inputs of f


def test_dynamic_tables_need_no_consumer_but_other_orphans_are_flagged() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          t: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: t, sql: SELECT name FROM a}}
          ext: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: ext}}
          unused: {{type: sql, primary_key: id, sql: SELECT * FROM a}}
        sinks:
          out: {{type: print, from: a}}
        """) == [
        "Source(s) and/or transform(s) have no consumers: unused. Remove them or connect them to a transform or sink."
    ]


def test_a_dynamic_table_cannot_be_read_as_an_input() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          t: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: t, sql: SELECT name FROM a}}
        sinks:
          out: {{type: print, from: t}}
        """) == [
        "sink 'out': 'from' references dynamic_table 't', which produces no rows; "
        "look values up with dynamic_table_check('t', value) instead"
    ]


def test_tables_are_evaluated_before_the_sql_that_checks_them() -> None:
    pipeline, report = load(f"""
        sources:
          src: {GEN}
        transforms:
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM src WHERE dynamic_table_check('z_table', name)
          z_table: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: z, sql: SELECT name FROM src}}
        sinks:
          out: {{type: print, from: f}}
        """)
    assert report.errors == []
    assert pipeline is not None
    assert pipeline.downstream("src") == ["z_table", "f", "out"]


def test_ordering_edges_take_part_in_cycle_detection() -> None:
    assert errors(f"""
        sources:
          src: {GEN}
        transforms:
          f:
            type: sql
            primary_key: id
            sql: SELECT * FROM src WHERE dynamic_table_check('t', name)
          t: {{type: dynamic_table, backend_type: InMemory, backend_entity_name: t, from: f, column: name}}
        sinks:
          out: {{type: print, from: f}}
        """) == ["pipeline has a cycle: f -> t -> f"]


def test_check_needs_a_literal_table_name() -> None:
    assert errors(f"""
        sources:
          a: {GEN}
        transforms:
          f: {{type: sql, primary_key: id, sql: "SELECT * FROM a WHERE dynamic_table_check(name, name)"}}
        sinks:
          out: {{type: print, from: f}}
        """) == [
        "transform 'f': dynamic_table_check takes a dynamic table name as a string literal and a value, as in "
        "dynamic_table_check('watchlist', address); got DYNAMIC_TABLE_CHECK(name, name)"
    ]


class Spy:
    """A lookup that records each call's distinct values."""

    def __init__(self, present: set[str]) -> None:
        self.present = present
        self.calls: list[list[str]] = []

    def contains(self, values: list[str]) -> set[str]:
        self.calls.append(sorted(values))
        return self.present & set(values)


def test_membership_asks_once_per_batch_for_distinct_values_and_keeps_nulls() -> None:
    spy = Spy({"a", "c"})
    result = membership(pa.array(["a", "b", None, "a", "c", "b"]), spy)
    assert result.to_pylist() == [True, False, None, True, True, False]
    assert spy.calls == [["a", "b", "c"]]


def test_membership_of_lists_is_any_element_and_handles_slices() -> None:
    spy = Spy({"x"})
    lists = pa.array([["q"], ["a", "x"], None, [], ["b", None], ["x"], ["z"]])[1:]
    assert membership(lists, spy).to_pylist() == [True, None, False, False, True, False]
    assert spy.calls == [["a", "b", "x", "z"]]


def test_membership_of_non_strings_compares_their_text() -> None:
    spy = Spy({"7"})
    assert membership(pa.array([7, 8, None]), spy).to_pylist() == [True, False, None]
