"""Script transforms in real pipelines: generator → script → sinks on the shared SparkSession, plus validation."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from streamling import run_pipeline, validate_pipeline
from streamling.errors import StreamlingError
from tests.integration.collect_sink import COLLECTED

DOC_EXAMPLE = """
sources:
  raw.transactions: {type: generator, rows: 1000}
transforms:
  tiered:
    type: script
    from: raw.transactions
    language: javascript
    primary_key: id
    schema: {id: bigint, amount: double, name: string, created_at: timestamp, tier: string}
    script: |
      function process(input) {
        input.tier = input.amount > 1000 ? 'premium' : 'standard';
        return input;
      }
sinks:
  out: {type: print, from: tiered}
"""
"""docs/transforms.md's `script` example (its `tiered` transform, kept verbatim: see
`test_the_example_is_the_documented_one`) with a source and a sink around it."""


def collect(text: str, sink: str = "out") -> tuple[str, str]:
    """The pipeline with `sink` swapped for a collecting one, and the key its rows land under."""
    key = uuid.uuid4().hex
    old = f"{sink}: {{type: print, from: "
    assert old in text
    return text.replace(old, f"{sink}: {{type: test.collect, options: {{key: {key}}}, from: "), key


def test_the_example_is_the_documented_one() -> None:
    transform = DOC_EXAMPLE[DOC_EXAMPLE.index("  tiered:") : DOC_EXAMPLE.index("sinks:")]
    assert transform in (Path(__file__).resolve().parents[2] / "docs" / "transforms.md").read_text()


def test_the_documented_example(spark, make_settings, write_pipeline) -> None:
    text, key = collect(DOC_EXAMPLE)
    summary = run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = [row for _, row in COLLECTED[key]]
    assert summary.sink_rows == {"out": 1000}
    assert sorted(r["id"] for r in rows) == list(range(1, 1001))
    assert all(r["tier"] == ("premium" if r["amount"] > 1000 else "standard") for r in rows)
    assert {r["tier"] for r in rows} == {"premium", "standard"}
    assert set(rows[0]) == {"id", "amount", "name", "created_at", "tier", "_gs_op"}
    assert rows[0]["created_at"].tzinfo is not None and isinstance(rows[0]["name"], str)


def test_the_documented_example_prints(spark, make_settings, write_pipeline, capsys) -> None:
    run_pipeline(write_pipeline(DOC_EXAMPLE.replace("rows: 1000", "rows: 2")), make_settings(job_mode=True), spark)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('1 -> (sample_every=1) [Insert] {"id": 1, "amount": 814.59, "name": "')
    assert lines[0].endswith('"tier": "standard", "_gs_op": "i"}')
    assert '"id": 2, "amount": 1853.62' in lines[1] and '"tier": "premium"' in lines[1]


def test_one_to_many_with_declared_schema_and_coercions(spark, make_settings, write_pipeline) -> None:
    text, key = collect("""
        sources:
          orders: {type: generator, rows: 40, record_batch_size: 15, schema: {id: bigint, amount: double}}
        transforms:
          lines:
            type: script
            from: orders
            language: javascript
            primary_key: [id, line]
            batch_size: 7
            schema: {id: bigint, line: int, qty: int, label: string, amount: "decimal(10,2)", big: boolean}
            script: |
              function explode(order) {
                if (order.id % 4 === 0) return null;              // dropped
                const out = [];
                for (let i = 0; i < order.id % 3 + 1; i++) {
                  out.push({id: String(order.id), line: i, qty: 2.9, label: order.id * 10,
                            amount: order.amount, big: order.amount > 1000 ? 'true' : 0});
                }
                out.push(null);                                     // null elements are dropped
                return out;
              }
        sinks:
          out: {type: print, from: lines}
        """)
    summary = run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = sorted((row for _, row in COLLECTED[key]), key=lambda r: (r["id"], r["line"]))
    expected = [(i, line) for i in range(1, 41) if i % 4 for line in range(i % 3 + 1)]
    assert [(r["id"], r["line"]) for r in rows] == expected
    assert summary.sink_rows == {"out": len(expected)}
    assert {r["qty"] for r in rows} == {2}
    assert all(r["label"] == str(r["id"] * 10) for r in rows)
    assert all(isinstance(r["big"], bool) for r in rows)
    assert str(rows[0]["amount"]) == "814.59"
    assert list(rows[0]) == ["id", "line", "qty", "label", "amount", "big", "_gs_op"]


def test_null_drops_rows_and_gs_op_is_the_input_rows(spark, make_settings, write_pipeline) -> None:
    text, key = collect("""
        sources:
          src: {type: generator, rows: 60, key_space: 20, delete_every: 7}
        transforms:
          odd:
            type: script
            from: src
            language: javascript
            primary_key: id
            script: |
              (row) => {
                if (row.id % 2 === 0) return undefined;
                row.name = row._gs_op;
                row._gs_op = 'i';   // ignored: every output row keeps its input row's operation
                return row;
              }
        sinks:
          out: {type: print, from: odd}
          raw: {type: print, from: src}
        """)
    text, raw_key = collect(text, "raw")
    run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = [row for _, row in COLLECTED[key]]
    assert len(rows) == 30 and all(r["id"] % 2 for r in rows)
    assert {r["_gs_op"] for r in rows} == {"i", "u", "d"}
    assert all(r["_gs_op"] == r["name"] for r in rows)  # the op the script saw is the op the row keeps
    raw = {r["created_at"]: r["_gs_op"] for _, r in COLLECTED[raw_key]}
    assert all(raw[r["created_at"]] == r["_gs_op"] for r in rows)


def test_typescript_with_interfaces_and_types(spark, make_settings, write_pipeline) -> None:
    text, key = collect("""
        sources:
          src: {type: generator, rows: 50}
        transforms:
          typed:
            type: script
            from: src
            language: typescript
            primary_key: id
            schema: {id: bigint, tier: string, cents: bigint}
            script: |
              interface Txn {
                id: number;
                amount: number;
                name: string;
              }
              type Tier = 'premium' | 'standard';

              function classify(input: Txn): {id: number; tier: Tier; cents: number} {
                const tier: Tier = input.amount > 1000 ? 'premium' : 'standard';
                return {id: input.id, tier, cents: Math.round(input.amount * 100) as number};
              }
        sinks:
          out: {type: print, from: typed}
        """)
    run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = {row["id"]: row for _, row in COLLECTED[key]}
    assert len(rows) == 50
    assert rows[1] == {"id": 1, "tier": "standard", "cents": 81459, "_gs_op": "i"}
    assert rows[2]["tier"] == "premium"


def test_error_names_row_stack_and_input(spark, make_settings, write_pipeline, tmp_path) -> None:
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 300, record_batch_size: 100, schema: {id: bigint, amount: double}}
        transforms:
          checked:
            type: script
            from: src
            language: javascript
            primary_key: id
            batch_size: 40
            script: |
              function process(input) {
                if (input.id === 250) {
                  throw new Error('amount check failed for ' + input.id);
                }
                return input;
              }
        sinks:
          out: {type: blackhole, from: checked}
        """)
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, make_settings(job_mode=True), spark)
    assert str(info.value) == (
        "script transform 'checked': row 10 of 40 in the batch: Error: amount check failed for 250; "
        'stack: at process (script:3); input row: {"id": 250, "amount": 1814.75, "_gs_op": "i"}'
    )
    assert info.value.user_facing


@pytest.mark.timeout(300)
def test_infinite_loop_fails_the_pipeline_within_the_limit(spark, make_settings, write_pipeline) -> None:
    text = """
        sources:
          src: {type: generator, rows: 10}
        transforms:
          stuck:
            type: script
            from: src
            language: javascript
            primary_key: id
            time_limit_ms: 500ms
            SCHEMA
            script: |
              function process(input) {
                for (;;) {}
              }
        sinks:
          out: {type: blackhole, from: stuck}
        """
    with pytest.raises(StreamlingError) as info:
        run_pipeline(
            write_pipeline(text.replace("SCHEMA", "schema: {id: bigint}")), make_settings(job_mode=True), spark
        )
    assert str(info.value).startswith(
        "script transform 'stuck': the script ran longer than its time limit of 500 ms for a batch of "
    )
    assert "; stopped at row 1 of " in str(info.value)
    # Without 'schema' the script runs on sample rows at validation (to infer its columns), and stops there.
    report = validate_pipeline(write_pipeline(text.replace("SCHEMA", "")), make_settings(), spark)
    assert report.errors == [
        "script transform 'stuck': cannot infer its output columns: running the script on sample rows built from "
        "the input schema failed: the script ran longer than its time limit of 500 ms for a batch of 3 rows; declare "
        "every output column in 'schema' on the node, e.g. schema: {id: bigint, amount: double, name: string, "
        "created_at: timestamp, …}"
    ]


@pytest.mark.timeout(300)
def test_memory_bomb_and_regex_fail_the_pipeline(spark, make_settings, write_pipeline) -> None:
    text = """
        sources:
          src: {type: generator, rows: 10}
        transforms:
          bad:
            type: script
            from: src
            language: javascript
            primary_key: id
            memory_limit_mb: 48
            time_limit_ms: 1s
            schema: {id: bigint}
            script: |
              function process(input) {
                BODY
              }
        sinks:
          out: {type: blackhole, from: bad}
        """
    bomb = "let s = []; while (true) s.push(new Array(100000).fill(input.id));"
    with pytest.raises(StreamlingError) as info:
        run_pipeline(write_pipeline(text.replace("BODY", bomb)), make_settings(job_mode=True), spark)
    assert "script transform 'bad': the script ran out of memory: it needs more than its memory limit of 48 MB" in str(
        info.value
    )
    regex = "return /^(a+)+$/.test('a'.repeat(45) + '!') ? input : null;"
    with pytest.raises(StreamlingError) as info:
        run_pipeline(write_pipeline(text.replace("BODY", regex)), make_settings(job_mode=True), spark)
    assert "script transform 'bad': the script ran longer than its time limit of 1000 ms" in str(info.value)


def test_no_require_fetch_or_files(spark, make_settings, write_pipeline) -> None:
    text, key = collect("""
        sources:
          src: {type: generator, rows: 1}
        transforms:
          probe:
            type: script
            from: src
            language: javascript
            primary_key: id
            schema: {id: bigint, globals: string, attempts: string}
            script: |
              function probe(input) {
                const attempts = [];
                for (const f of [() => require('fs'), () => fetch('http://127.0.0.1:1/'),
                                 () => process.env, () => std.open('/etc/passwd', 'r')]) {
                  try { f(); attempts.push('ok'); } catch (e) { attempts.push(e.name); }
                }
                return {id: input.id, attempts: attempts.join(','),
                        globals: [typeof require, typeof fetch, typeof process, typeof std].join(',')};
              }
        sinks:
          out: {type: print, from: probe}
        """)
    run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    [(_, row)] = COLLECTED[key]
    assert row["globals"] == "undefined,undefined,undefined,undefined"
    assert row["attempts"] == "ReferenceError,ReferenceError,ReferenceError,ReferenceError"


def test_script_output_feeds_sql(spark, make_settings, write_pipeline) -> None:
    text, key = collect("""
        sources:
          src: {type: generator, rows: 100}
        transforms:
          tiered:
            type: script
            from: src
            language: javascript
            primary_key: id
            schema: {id: bigint, amount: double, tier: string}
            script: "row => ({...row, tier: row.amount > 1000 ? 'premium' : 'standard'})"
          premium:
            type: sql
            primary_key: id
            sql: SELECT id, amount FROM tiered WHERE tier = 'premium'
        sinks:
          out: {type: print, from: premium}
        """)
    run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = [row for _, row in COLLECTED[key]]
    assert rows and all(r["amount"] > 1000 for r in rows)


VALIDATION = """
sources:
  src: {type: generator, rows: 10}
transforms:
  t:
    type: script
    from: src
    language: LANGUAGE
    PRIMARY_KEY
    script: |
      function process(input) {
        const total = input.amount *;
        return input;
      }
sinks:
  out: {type: blackhole, from: t}
"""


@pytest.mark.parametrize(
    ("language", "primary_key", "errors"),
    [
        (
            "python",
            "primary_key: id",
            [
                "transform 't' (type 'script'): field 'language': Input should be 'javascript' or 'typescript' (got 'python')"
            ],
        ),
        ("javascript", "", ["transform 't' (type 'script'): missing required field 'primary_key'"]),
        (
            "javascript",
            "primary_key: id",
            [
                "transform 't' (type 'script'): script does not parse: SyntaxError: unexpected token in expression: "
                "';' at line 2"
            ],
        ),
        (
            "typescript",
            "primary_key: id",
            [
                "transform 't' (type 'script'): script does not parse: SyntaxError: Unexpected token at line 2, column 31"
            ],
        ),
    ],
)
def test_validation_errors(spark, make_settings, write_pipeline, language, primary_key, errors) -> None:
    text = VALIDATION.replace("LANGUAGE", language).replace("PRIMARY_KEY", primary_key)
    report = validate_pipeline(write_pipeline(text), make_settings(), spark)
    assert report.errors == errors


def test_validation_checks_primary_key_and_schema(spark, make_settings, write_pipeline) -> None:
    text = """
        sources:
          src: {type: generator, rows: 10}
        transforms:
          t:
            type: script
            from: src
            language: javascript
            primary_key: KEY
            SCHEMA
            script: "row => row"
        sinks:
          out: {type: blackhole, from: t}
        """
    settings = make_settings()
    report = validate_pipeline(write_pipeline(text.replace("KEY", "id").replace("SCHEMA", "")), settings, spark)
    assert report.errors == []
    report = validate_pipeline(
        write_pipeline(text.replace("KEY", "tier").replace("SCHEMA", "schema: {id: bigint}")), settings, spark
    )
    assert report.errors == [
        "Primary key validation failed for node 't': columns [\"tier\"] not found in schema. Available columns: "
        '["id", "_gs_op"]'
    ]
    report = validate_pipeline(
        write_pipeline(text.replace("KEY", "id").replace("SCHEMA", "schema: {id: long, x: money}")), settings, spark
    )
    assert report.errors[0].startswith("transform 't' (type 'script'): field 'schema': unknown column type 'money'")


def test_dagster_shows_the_script_and_reports_an_invalid_script_transform(tmp_path) -> None:
    import dagster as dg

    from streamling_dagster import build_definitions

    (tmp_path / "tiers.yaml").write_text(DOC_EXAMPLE)
    (tmp_path / "broken.yaml").write_text(VALIDATION.replace("LANGUAGE", "javascript").replace("PRIMARY_KEY", ""))
    defs = build_definitions(tmp_path)
    tiered = defs.resolve_asset_graph().get(dg.AssetKey(["tiers", "tiered"]))
    assert tiered.metadata["language"] == "javascript"
    assert "input.tier = input.amount > 1000 ? 'premium' : 'standard';" in tiered.metadata["script"].value
    check = defs.get_asset_checks_def(dg.AssetCheckKey(dg.AssetKey(["broken", "pipeline"]), "pipeline_is_valid"))
    outcome = check()
    assert not outcome.passed
    assert "transform 't' (type 'script'): missing required field 'primary_key'" in outcome.description
