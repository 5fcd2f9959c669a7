"""Fuzzing the pipeline parser: whatever the file holds, structural validation answers with messages, never
with a traceback.

Hypothesis builds random YAML documents, random text and bytes, and mutations of valid pipelines (fields
deleted, renamed, given wrong types, huge/unicode/control-character strings, deep nesting, nodes moved
between sections, duplicate names, cycles, anchors and aliases, recursive aliases). Everything here is
structural and needs no Spark. Inputs that once crashed the parser are kept as explicit ``@example``s.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import streamling  # noqa: F401  (registers the built-in operator types)
from streamling.core.messages import quoted
from streamling.topology.pipeline import ValidationReport, load_pipeline, read_pipeline_text

EXAMPLES = int(os.environ.get("STREAMLING_FUZZ_EXAMPLES", "150"))
"""Examples per property; raise it (e.g. 5000) for a deeper local run."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASES: list[dict[str, Any]] = [
    {
        "sources": {"raw.transactions": {"type": "generator", "rows_per_second": 200, "primary_key": "id"}},
        "transforms": {
            "large": {"type": "sql", "primary_key": "id", "sql": "SELECT * FROM raw.transactions WHERE amount > 1"}
        },
        "sinks": {
            "print_large": {"type": "print", "from": "large", "sample_every": 10},
            "count_all": {"type": "blackhole", "from": "raw.transactions"},
        },
    },
    {
        "sources": {"accounts": {"type": "generator", "rows": 100, "key_space": 50, "primary_key": "id"}},
        "transforms": {
            "vip": {
                "type": "dynamic_table",
                "backend_type": "Postgres",
                "backend_entity_name": "vip_names",
                "schema": "demo",
                "sql": "SELECT name FROM accounts WHERE amount > 1999.5",
            },
            "changes": {
                "type": "sql",
                "primary_key": ["id"],
                "sql": "SELECT id, name, amount, dynamic_table_check('vip', name) AS vip FROM accounts",
                "telemetry": {"labels": {"team": "core"}},
            },
        },
        "sinks": {
            "latest": {
                "type": "postgres",
                "from": "changes",
                "schema": "demo",
                "table": "accounts",
                "update_where": {"amount": ">"},
            },
            "by_name": {
                "type": "postgres_aggregate",
                "from": "changes",
                "landing_table": "landing",
                "agg_table": "totals",
                "group_by": {"name": {}},
                "aggregate": {"n": {"fn": "count"}, "total": {"from": "amount", "fn": "sum"}},
            },
        },
        "orchestration": {"backfill_schedule": "0 3 * * *"},
    },
    {
        "sources": {
            "orders": {"type": "kafka", "topic": "orders", "data_format": "json", "schema": {"id": "bigint"}},
            "history": {
                "type": "hybrid",
                "primary_key": "id",
                "bounded_sources": [{"source_type": "clickhouse", "table_name": "t", "filter": "id > 0"}],
                "unbounded_source": {"source_type": "kafka", "topic": "t", "start_at": "earliest"},
            },
            "table": {"type": "clickhouse", "table_name": "db.accounts", "columns": "id, name"},
        },
        "sinks": {
            "out": {"type": "kafka", "from": "orders", "topic": "out", "primary_key": "id"},
            "ch": {"type": "clickhouse", "from": "history", "table": "h", "schema_override": {"id": "UInt64"}},
            "p": {"type": "print", "from": "table"},
        },
    },
]

# Strings that have broken parsers elsewhere: control characters, lone surrogates, bidi overrides, NUL,
# quotes and SQL/YAML metacharacters.
NASTY = [
    "",
    " ",
    "\x00",
    "\x1b[31mred\x1b[0m",
    "\ud800",
    "\udfff",
    "\u202e",
    "\ufeff",
    "a\nb",
    "'",
    '"',
    "`",
    'x"; DROP TABLE victims; --',
    "&anchor",
    "*alias",
    "!!python/object:os.system",
    "{",
    "- ",
    "🦄" * 10,
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**30, -(10**40), 2**63, 2**64])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.text(alphabet=st.characters(codec=None), max_size=20)
    | st.sampled_from(NASTY)
    | st.binary(max_size=8)
    | st.dates()
    | st.datetimes()
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
    max_leaves=12,
)


def dump(doc: Any, *, flow: bool | None = None, unicode: bool = True) -> str:
    return yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=unicode, sort_keys=False)


def structural(text: str) -> ValidationReport:
    """The invariant: a report, never an exception; an invalid pipeline has non-empty string messages."""
    pipeline, report = load_pipeline(text, name="fuzz")
    assert isinstance(report.errors, list) and isinstance(report.warnings, list)
    for message in [*report.errors, *report.warnings]:
        assert isinstance(message, str) and message.strip(), report.errors
        assert len(message) < 2000, f"values are shortened in messages: {message[:300]}…"
    if pipeline is None:
        assert report.errors, "an invalid pipeline must say why"
    else:
        assert report.errors == []
    parsed = json.loads(report.to_json())  # what --validate prints
    assert parsed["is_valid"] is (pipeline is not None)
    return report


def _paths(doc: Any, prefix: tuple = (), seen: frozenset[int] = frozenset()) -> list[tuple]:
    """Every path into `doc`, down to 30 levels, not following a (recursive) container into itself."""
    out = [prefix]
    if id(doc) in seen or len(prefix) > 30:
        return out
    seen |= {id(doc)}
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key), seen)
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index), seen)
    return out


def _at(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _parent(doc: Any, path: tuple) -> Any:
    return _at(doc, path[:-1])


MUTATIONS = ("delete", "replace", "rename", "wrap", "huge", "nasty", "deep", "alias", "recursive")


def mutate(doc: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent, key = _parent(doc, path), path[-1]
        kind = data.draw(st.sampled_from(MUTATIONS), label="mutation")
        if kind == "delete":
            del parent[key]
        elif kind == "replace":
            parent[key] = data.draw(junk, label="value")
        elif kind == "rename" and isinstance(parent, dict):
            new = data.draw(st.text(max_size=12) | st.sampled_from(NASTY) | st.integers(), label="new key")
            parent[new] = parent.pop(key)
        elif kind == "wrap":
            parent[key] = [parent[key]]
        elif kind == "huge":
            parent[key] = data.draw(st.sampled_from(["x", "é", "\x07", "'"])) * 100_000
        elif kind == "nasty":
            parent[key] = data.draw(st.sampled_from(NASTY), label="nasty")
        elif kind == "deep":
            value: Any = parent[key]
            for _ in range(data.draw(st.integers(10, 300), label="depth")):
                value = [value] if data.draw(st.booleans()) else {"k": value}
            parent[key] = value
        elif kind == "alias":  # the same object twice: safe_dump writes an anchor and an alias
            parent[key] = _at(doc, data.draw(st.sampled_from(paths), label="aliased"))
        elif kind == "recursive" and len(path) > 1:  # a node that contains itself
            parent[key] = _parent(doc, path)
    return doc


@FUZZ
@given(st.text())
@example("")
@example("\x00")
@example("sources: " + "[" * 5000 + "]" * 5000)  # RecursionError in the YAML parser
@example("sources: {a: {type: generator, rows: " + "9" * 5000 + "}}\nsinks: {p: {type: print, from: a}}")
@example("sources: {a: {type: generator, start_time: 2020-02-30}}\nsinks: {p: {type: print, from: a}}")
def test_random_text(text: str) -> None:
    structural(text)


@FUZZ
@given(junk)
def test_random_yaml_documents(doc: Any) -> None:
    structural(dump(doc))


@FUZZ
@given(st.sampled_from(BASES), st.dictionaries(st.sampled_from(["sources", "transforms", "sinks"]), junk))
def test_random_sections(base: dict[str, Any], sections: dict[str, Any]) -> None:
    structural(dump({**base, **sections}))


@FUZZ
@given(st.sampled_from(range(len(BASES))), st.data())
def test_mutated_pipelines(base: int, data: st.DataObject) -> None:
    doc = mutate(BASES[base], data)
    flow = data.draw(st.sampled_from([None, True, False]), label="flow")
    structural(dump(doc, flow=flow, unicode=data.draw(st.booleans(), label="unicode")))


def test_bases_are_valid() -> None:
    """The mutations start from pipelines that are valid, so every problem found is the mutation's."""
    for base in BASES:
        assert structural(dump(base)).errors == []


def _node_fields() -> list[tuple[int, str, str, str, str]]:
    """(base, section, kind, node, field) for every field of every node of the bases."""
    kinds = {"sources": "source", "transforms": "transform", "sinks": "sink"}
    return [
        (index, section, kinds[section], name, field)
        for index, base in enumerate(BASES)
        for section in kinds
        for name, body in base.get(section, {}).items()
        for field in body
    ]


NODE_FIELDS = _node_fields()
wrong_values = junk.filter(lambda v: not isinstance(v, str))


@FUZZ
@given(st.sampled_from(NODE_FIELDS), wrong_values)
@example((0, "sinks", "sink", "print_large", "sample_every"), "\ud800")  # regression: lone surrogates
@example((1, "sinks", "sink", "by_name", "group_by"), {"'\x1f": False})
@example((2, "sources", "source", "orders", "schema"), {"id": "nope"})  # regression: a StreamlingError escaped
def test_a_wrong_field_type_is_reported_naming_node_and_field(where: tuple, value: Any) -> None:
    base, section, kind, name, field = where
    doc = copy.deepcopy(BASES[base])
    doc[section][name][field] = value
    report = structural(dump(doc))
    if report.errors:
        label = f"{kind} '{name}'"
        named = (f"'{field}", f'"{field}')  # quoted, or escaped like repr when the path holds odd characters
        assert any(e.startswith(label) and any(n in e for n in named) for e in report.errors) or any(
            e.startswith("pipeline is not valid YAML") for e in report.errors
        ), report.errors


@FUZZ
@given(st.sampled_from(NODE_FIELDS))
def test_a_deleted_field_is_reported_naming_node_and_field(where: tuple) -> None:
    base, section, kind, name, field = where
    doc = copy.deepcopy(BASES[base])
    fields = list(doc[section][name])
    del doc[section][name][field]
    report = structural(dump(doc))
    own = [e for e in report.errors if e.startswith(f"{kind} '{name}'")]
    if own:  # the field, or the one that now conflicts with a default (`schema` once `data_format` is gone)
        assert any(f"'{f}'" in e for e in own for f in fields), report.errors


@FUZZ
@given(st.text() | st.sampled_from(NASTY) | st.integers() | st.none() | st.booleans() | st.dates())
@example("\x1b[31m")
@example("")
@example("\u202e")
@example("p")  # the sink's own name: reported as a duplicate
def test_any_node_name(name: Any) -> None:
    doc = {"sources": {name: {"type": "generator"}}, "sinks": {"p": {"type": "print", "from": name}}}
    if name == "p":
        assert structural(dump(doc)).errors == ["sink 'p': the name 'p' is already used by source 'p'"]
        return
    text = dump(doc)
    report = structural(text)
    if isinstance(name, str) and "holds a lone surrogate" not in "".join(report.errors):
        (name,) = yaml.safe_load(text)["sources"]  # what YAML makes of it: '\x85' (NEL) reads as ' '
    if not isinstance(name, str):  # the node is named str(name), but `from` must be a string
        assert report.errors == [
            f"sink 'p' (type 'print'): field 'from': Input should be a valid string (got {name!r})"
        ]
    elif name and name == name.strip() and name.isprintable():
        assert report.errors == []
    else:
        (error,) = report.errors  # the sink's reference to the rejected name is not reported again
        if any("\ud800" <= ch <= "\udfff" for ch in name):
            assert error.startswith("pipeline is not valid YAML at line ") and "holds a lone surrogate" in error
        else:
            assert error.startswith(f"source {quoted(name)}: the node name "), error


@FUZZ
@given(st.sampled_from(["sources", "transforms", "sinks"]), st.sampled_from(["sources", "transforms", "sinks"]))
def test_duplicate_names_across_sections(first: str, second: str) -> None:
    bodies = {
        "sources": {"type": "generator"},
        "transforms": {"type": "sql", "primary_key": "id", "sql": "SELECT * FROM src"},
        "sinks": {"type": "print", "from": "src"},
    }
    doc: dict[str, Any] = {"sources": {"src": bodies["sources"]}, "transforms": {}, "sinks": {"out": bodies["sinks"]}}
    doc[first]["dup"] = bodies[first]
    doc[second]["dup"] = bodies[second]  # the same section twice: one definition replaces the other
    report = structural(dump(doc))
    if first != second:
        kinds = ["sources", "transforms", "sinks"]
        a, b = sorted([first, second], key=kinds.index)
        assert f"{b[:-1]} 'dup': the name 'dup' is already used by {a[:-1]} 'dup'" in report.errors


@FUZZ
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))
    )
)
def test_cycles_are_found_and_named(graph: tuple[int, list[tuple[int, int]]]) -> None:
    """Random graphs of SQL transforms: a cycle is reported exactly when there is one, along real edges."""
    n, edges = graph
    reads = {f"t{i}": sorted({f"t{b}" for a, b in edges if a == i}) for i in range(n)}
    transforms = {
        name: {
            "type": "sql",
            "primary_key": "id",
            "sql": " UNION ALL ".join(f"SELECT * FROM {p}" for p in ["src", *parents]),
        }
        for name, parents in reads.items()
    }
    doc = {
        "sources": {"src": {"type": "generator"}},
        "transforms": transforms,
        "sinks": {f"out{i}": {"type": "print", "from": f"t{i}"} for i in range(n)},
    }
    report = structural(dump(doc))

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(reads[start])
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += reads[node]
        return False

    cyclic = any(reaches(t, t) for t in reads)
    cycles = [e for e in report.errors if e.startswith("pipeline has a cycle: ")]
    assert bool(cycles) == cyclic, report.errors
    if cycles:
        (message,) = cycles
        path = message.removeprefix("pipeline has a cycle: ").split(" -> ")
        assert path[0] == path[-1]
        for reader, parent in itertools.pairwise(path):  # each arrow points from a node to one that reads it
            assert reader in reads[parent], (message, reads)
    else:
        assert report.errors == []


SQL_TOKENS = [
    *"SELECT * FROM src WHERE ( ) , ' \" ` ; -- /* */ UNION ALL dynamic_table_check WITH AS x 1 JOIN :: $$ \\".split(),
    "('x', 1)",
    "\x00",
    "\n",
]


@FUZZ
@given(st.lists(st.sampled_from(SQL_TOKENS), max_size=25).map(" ".join) | st.text())
@example("SELECT * FROM " + "(" * 3000 + "src" + ")" * 3000)
@example("SELECT dynamic_table_check(1, 2) FROM src")
def test_random_sql(sql: str) -> None:
    doc = {
        "sources": {"src": {"type": "generator"}},
        "transforms": {"t": {"type": "sql", "primary_key": "id", "sql": sql}},
        "sinks": {"p": {"type": "print", "from": "t"}},
    }
    report = structural(dump(doc))
    for error in report.errors:
        assert error.startswith(("transform 't'", "sink 'p'", "dynamic table", "Source(s)", "pipeline has a cycle"))


@FUZZ
@given(st.dictionaries(st.text(max_size=10) | st.sampled_from(NASTY) | st.integers(), junk, max_size=25))
def test_random_telemetry_labels(labels: dict[Any, Any]) -> None:
    doc = {
        "sources": {"src": {"type": "generator", "telemetry": {"labels": labels}}},
        "sinks": {"p": {"type": "print", "from": "src"}},
    }
    report = structural(dump(doc))
    assert all(e.startswith("source 'src'") or e.startswith("pipeline is not valid YAML") for e in report.errors)


@FUZZ
@given(st.binary(max_size=200))
@example(b"\xff\xfe\x00s")
@example(b"sources: {a: {type: generator}}\nsinks: {p: {type: print, from: \xe9}}")
def test_any_file_content(content: bytes) -> None:
    import tempfile
    from pathlib import Path

    from streamling.errors import StreamlingError

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "p.yaml"
        path.write_bytes(content)
        try:
            text = read_pipeline_text(path)
        except StreamlingError as exc:
            assert exc.user_facing
            assert exc.message.startswith(f"pipeline file '{path}' is not UTF-8 text: byte 0x")
            return
    structural(text)


S = "\nsinks: {p: {type: print, from: a}}"
LAUGHS = "x: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else '*a'] * 10)}]\n" for i in range(7)
)
REGRESSIONS = [
    (
        "sources: " + "[" * 100 + "]" * 100,
        "pipeline is not valid YAML at line 1, column 73: nested more than 64 levels deep",
    ),
    (
        "sources: {a: {type: generator, rows: " + "9" * 5000 + "}}" + S,
        "pipeline is not valid YAML at line 1, column 38: cannot read the value "
        "'99999999999999999999999999999999999999999999999999999999999… (5002 characters): too many digits",
    ),
    (
        "sources: {a: {type: generator, start_time: 2020-02-30}}" + S,
        "pipeline is not valid YAML at line 1, column 44: cannot read the value '2020-02-30': day is out of range for month",
    ),
    (
        "sources:\n  a: {type: generator}\n  a: {type: generator, rows: 5}" + S,
        "pipeline is not valid YAML at line 3, column 3: the key 'a' is given twice (first at line 2)",
    ),
    (
        "sources: &s {a: {type: generator}, b: *s}" + S,
        "pipeline is not valid YAML at line 1, column 10: an alias refers to a node that contains it",
    ),
    (
        LAUGHS + "sources: {a: {type: generator}}" + S,
        "pipeline is not valid YAML at line 6, column 5: aliases expand the document to more than 1000000 values",
    ),
    (
        'sources: {"a\\ud800": {type: generator}}' + S,
        "pipeline is not valid YAML at line 1, column 11: 'a\\ud800' holds a lone surrogate, which is not text",
    ),
    (
        "sources: {a: {type: kafka, topic: t, data_format: json, schema: {id: nope}}}" + S,
        "source 'a' (type 'kafka'): field 'schema': column 'id': unknown column type 'nope'; use one of: bigint, int, "
        "smallint, tinyint, double, float, string, boolean, binary, date, timestamp, decimal(p,s) (got {'id': 'nope'})",
    ),
    (
        "sources: {a: {type: generator, schema: {id: bigint, n: 'decimal(50,2)'}}}" + S,
        "source 'a' (type 'generator'): field 'schema': column 'n': unsupported decimal type 'decimal(50,2)': "
        "precision must be 1..38, scale ≤ precision (got {'id': 'bigint', 'n': 'decimal(50,2)'})",
    ),
    (
        "sources: {a: {type: generator}}\ntransforms: {t: {type: sql, primary_key: id, sql: 'SELECT * FROM "
        + "(" * 3000
        + "a"
        + ")" * 3000
        + "'}}\nsinks: {p: {type: print, from: t}}",
        "transform 't': invalid SQL: nested too deeply to parse",
    ),
    (
        "sources: {a: {type: generator, rows: '" + "x" * 10_000 + "'}}" + S,
        "source 'a' (type 'generator'): field 'rows': Input should be a valid integer, unable to parse string as an "
        "integer (got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (10002 characters))",
    ),
]


@pytest.mark.parametrize(("text", "message"), REGRESSIONS)
def test_inputs_that_once_crashed_the_parser(text: str, message: str) -> None:
    assert structural(text).errors == [message]


def test_node_names_that_cannot_be_referenced_or_printed() -> None:
    text = 'sources: {"a\\x1b[31m": {type: generator}, " b": {type: generator}, "": {type: generator}}' + S
    assert structural(text).errors == [
        "source 'a\\x1b[31m': the node name holds a control or other non-printable character",
        "source ' b': the node name starts or ends with whitespace",
        "source '': the node name is empty",
        "sink 'p': 'from' references unknown node 'a'",
    ]


def test_a_file_that_is_not_utf8(tmp_path) -> None:
    from streamling.errors import StreamlingError

    path = tmp_path / "p.yaml"
    path.write_bytes(b"sources: {a: {type: generator}}\nsinks: {p: {type: print, from: \xe9}}")
    with pytest.raises(StreamlingError) as raised:
        read_pipeline_text(path)
    assert raised.value.user_facing
    assert raised.value.message == (
        f"pipeline file '{path}' is not UTF-8 text: byte 0xe9 at offset 63 (invalid continuation byte)"
    )
