"""The script sandbox without Spark: limits, isolation, syntax errors, the batch protocol, coercions, Arrow round
trips and TypeScript."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.script import codec, typescript
from streamling.script.sandbox import LimitExceeded, Limits, Sandbox, ScriptSyntaxError, check_script, sandbox_for
from streamling.script.transform import ScriptProgram, _arrow_schema, rebatch

LIMITS = Limits(5_000, 64)
ROWS = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("name", T.StringType()),
        T.StructField(GS_OP, T.StringType(), False),
    ]
)


def batch_of(rows: list[dict], schema: T.StructType = ROWS) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_arrow_schema(schema, "UTC"))


def program(
    script: str,
    out: T.StructType | None = None,
    schema: T.StructType = ROWS,
    limits: Limits = LIMITS,
    batch_size: int = 1000,
) -> ScriptProgram:
    strict = out is None
    outputs = out if out is not None else T.StructType([f for f in schema.fields if f.name != GS_OP])
    full = T.StructType([*outputs.fields, T.StructField(GS_OP, T.StringType(), False)])
    return ScriptProgram(
        label="script transform 't'",
        script=script,
        inputs=codec.columns_of(schema),
        outputs=codec.outputs_of(outputs, schema),
        strict=strict,
        limits=limits,
        batch_size=batch_size,
        arrow_schema=_arrow_schema(full, "UTC"),
    )


def rows(n: int) -> list[dict]:
    return [{"id": i, "amount": i * 10.5, "name": f"n{i}", GS_OP: "i"} for i in range(1, n + 1)]


def run(script: str, data: list[dict], **kwargs) -> list[dict]:
    return program(script, **kwargs).process(batch_of(data, kwargs.get("schema", ROWS))).to_pylist()


# ---------------------------------------------------------------- limits and isolation


@pytest.mark.timeout(60)
def test_infinite_loop_stops_at_the_time_limit() -> None:
    with pytest.raises(StreamlingError) as info:
        run(
            "function spin(row) {\n  if (row.id === 2) { while (true) {} }\n  return row;\n}",
            rows(3),
            limits=Limits(300, 64),
        )
    message = str(info.value)
    assert message.startswith(
        "script transform 't': the script ran longer than its time limit of 300 ms for a batch of 3 rows; "
        "stopped at row 2 of 3 in the batch; input row: {"
    )
    assert '"id": 2' in message


@pytest.mark.timeout(60)
def test_memory_bomb_stops_at_the_memory_limit() -> None:
    bomb = "function grow(row) {\n  const keep = [];\n  while (true) keep.push('x'.repeat(1024) + keep.length);\n}"
    with pytest.raises(StreamlingError) as info:
        run(bomb, rows(2), limits=Limits(60_000, 32))
    assert str(info.value).startswith(
        "script transform 't': the script ran out of memory: it needs more than its memory limit of 32 MB for a "
        "batch of 2 rows; stopped at row 1 of 2 in the batch; input row: {"
    )


@pytest.mark.timeout(60)
def test_memory_limit_is_enforced_by_the_store_not_quickjs() -> None:
    """quickjs-rs's own memory_limit is not enforced: the cap is the wasmtime store's, so the sandbox never holds
    more linear memory than the limit, and a sandbox that hit it is not reused."""
    sandbox = Sandbox(Limits(60_000, 24))
    sandbox.load("function f(row) { return row; }")
    with pytest.raises(LimitExceeded) as info:
        sandbox.call("(function () { const a = []; while (true) a.push(new Array(4096).fill(1)); })()", {})
    assert info.value.what == "memory"
    assert sandbox.memory_bytes <= 24 * 2**20
    with pytest.raises(Exception, match="cannot be reused"):
        sandbox.call("1", {})
    sandbox.close()


@pytest.mark.timeout(60)
def test_catastrophic_regex_stops_at_the_time_limit() -> None:
    script = "function check(row) {\n  row.name = String(/^(a+)+$/.test('a'.repeat(40) + 'b'));\n  return row;\n}"
    with pytest.raises(StreamlingError, match="the script ran longer than its time limit of 300 ms"):
        run(script, rows(1), limits=Limits(300, 64))


@pytest.mark.timeout(60)
def test_the_time_limit_applies_per_batch_and_a_stopped_sandbox_is_replaced() -> None:
    slow = program("function f(row) { if (row.id === 99) { while (true) {} } return row; }", limits=Limits(300, 64))
    with pytest.raises(StreamlingError):
        slow.process(batch_of([{"id": 99, "amount": 1.0, "name": "x", GS_OP: "i"}]))
    assert slow.process(batch_of(rows(2))).num_rows == 2  # a fresh sandbox, not the interrupted one


def test_no_host_access_from_scripts() -> None:
    probe = """function probe(row) {
  return {name: [typeof require, typeof fetch, typeof process, typeof std, typeof os, typeof console,
                 typeof XMLHttpRequest, typeof WebAssembly, typeof import_meta_unused].join(',')};
}"""
    out = run(probe, rows(1), out=T.StructType([T.StructField("name", T.StringType())]))
    assert out[0]["name"] == ",".join(["undefined"] * 9)
    for attempt, error in [
        ("require('fs').readFileSync('/etc/passwd', 'utf8')", "ReferenceError: require is not defined"),
        ("fetch('http://127.0.0.1/')", "ReferenceError: fetch is not defined"),
        ("process.env.HOME", "ReferenceError: process is not defined"),
        ("std.loadFile('/etc/passwd')", "ReferenceError: std is not defined"),
    ]:
        with pytest.raises(StreamlingError) as info:
            run(f"function steal(row) {{\n  row.name = {attempt};\n  return row;\n}}", rows(1))
        assert f"row 1 of 1 in the batch: {error}; stack: at steal (script:2)" in str(info.value)
    # Dynamic import has no loader: the promise rejects and nothing is read.
    out = run(
        "function f(row) {\n  let state = 'pending';\n  import('fs').then(() => { state = 'loaded'; });\n"
        "  row.name = state;\n  return row;\n}",
        rows(1),
    )
    assert out[0]["name"] == "pending"


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("function f(row) {\n  return row +;\n}", "SyntaxError: unexpected token in expression: ';' at line 2"),
        ("function f(row) {\n  return row;\n", "SyntaxError: "),
        ("42", "the script must be a single function expression, but it evaluates to a number"),
        ("function a(r) { return r; }\nfunction b(r) { return r; }", "SyntaxError: "),
    ],
)
def test_scripts_that_do_not_parse(script: str, message: str) -> None:
    with pytest.raises(ScriptSyntaxError) as info:
        check_script(script)
    assert str(info.value).startswith(message)


def test_any_function_expression_is_accepted() -> None:
    for script in ["function process(input) { return input; };", "(row) => row", "row => ({...row})"]:
        check_script(script)


# ---------------------------------------------------------------- semantics


def test_one_row_many_rows_and_dropped_rows() -> None:
    script = """function fan(row) {
  if (row.id === 1) return null;
  if (row.id === 2) return undefined;
  if (row.id === 3) return [{id: 30}, null, {id: 31, name: 'b'}];
  return {id: row.id * 10};
}"""
    out = run(
        script, rows(4), out=T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])
    )
    assert out == [
        {"id": 30, "name": None, GS_OP: "i"},
        {"id": 31, "name": "b", GS_OP: "i"},
        {"id": 40, "name": None, GS_OP: "i"},
    ]


def test_gs_op_is_the_input_rows() -> None:
    data = [{"id": 1, "amount": 1.0, "name": "a", GS_OP: "u"}, {"id": 2, "amount": 2.0, "name": "b", GS_OP: "d"}]
    script = "function f(row) { return [{...row, _gs_op: 'i'}, {...row, id: row.id + 100, _gs_op: 'x'}]; }"
    out = run(script, data)
    assert [(r["id"], r[GS_OP]) for r in out] == [(1, "u"), (101, "u"), (2, "d"), (102, "d")]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("42", None),
        ("[1, 2]", "element 0 of the returned array is a number; elements must be objects or null"),
        ("[[{id: 1}]]", "element 0 of the returned array is an array; elements must be objects or null"),
        ("'text'", "returned a string; return an object, an array of objects, or null"),
        ("Promise.resolve(row)", "returned a Promise; the function must return its rows synchronously (no async)"),
    ],
)
def test_return_shapes(value: str, error: str | None) -> None:
    script = f"function f(row) {{ return {value}; }}"
    if error is None:
        with pytest.raises(StreamlingError, match="returned a number; return an object"):
            run(script, rows(1))
        return
    with pytest.raises(StreamlingError) as info:
        run(script, rows(2))
    assert str(info.value).startswith(f"script transform 't': row 1 of 2 in the batch: the script {error}; input row:")


def test_coercions_to_declared_types() -> None:
    out_schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("small", T.IntegerType()),
            T.StructField("ratio", T.DoubleType()),
            T.StructField("label", T.StringType()),
            T.StructField("flag", T.BooleanType()),
            T.StructField("at", T.TimestampType()),
            T.StructField("day", T.DateType()),
            T.StructField("price", T.DecimalType(10, 2)),
            T.StructField("raw", T.BinaryType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("missing", T.StringType()),
        ]
    )
    script = """function f(row) {
  return {id: '7', small: 2.9, ratio: '1.5', label: 42, flag: 'true', at: 0, day: '2025-03-04T05:06:07Z',
          price: 0.1 + 0.2, raw: 'AAEC', tags: ['a', 'b'], extra: 'ignored'};
}"""
    (out,) = run(script, rows(1), out=out_schema)
    assert out == {
        "id": 7,
        "small": 2,
        "ratio": 1.5,
        "label": "42",
        "flag": True,
        "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        "day": dt.date(2025, 3, 4),
        "price": Decimal("0.30"),
        "raw": b"\x00\x01\x02",
        "tags": ["a", "b"],
        "missing": None,
        GS_OP: "i",
    }


@pytest.mark.parametrize(
    ("column", "type_", "value", "reason"),
    [
        ("qty", T.IntegerType(), "'seven'", "column 'qty': value \"seven\" is not a number"),
        ("qty", T.IntegerType(), "2 ** 40", "column 'qty': value 1099511627776 is out of range for int32"),
        ("qty", T.IntegerType(), "{a: 1}", "column 'qty': value {\"a\":1} (an object) cannot be converted to int32"),
        ("ok", T.BooleanType(), "'maybe'", "column 'ok': value \"maybe\" (a string) cannot be converted to boolean"),
        ("at", T.TimestampType(), "'soon'", "column 'at': value \"soon\" cannot be converted to timestamp"),
        ("price", T.DecimalType(4, 2), "'123.456'", "column 'price': value \"123.456\" does not fit decimal(4,2)"),
    ],
)
def test_impossible_coercions_name_row_column_and_value(column, type_, value, reason) -> None:
    script = f"function f(row) {{ return row.id === 2 ? {{{column}: {value}}} : {{}}; }}"
    with pytest.raises(StreamlingError) as info:
        run(script, rows(3), out=T.StructType([T.StructField(column, type_)]))
    message = str(info.value)
    assert message.startswith(f"script transform 't': row 2 of 3 in the batch: {reason}"), message
    assert message.endswith('; input row: {"id": 2, "amount": 21.0, "name": "n2", "_gs_op": "i"}')


def test_errors_show_row_message_stack_and_truncated_input() -> None:
    script = """function process(input) {
  function check(row) {
    if (row.id === 3) throw new RangeError('amount too large: ' + row.amount);
  }
  check(input);
  return input;
}"""
    data = rows(4)
    data[2]["name"] = "x" * 1000
    with pytest.raises(StreamlingError) as info:
        run(script, data)
    message = str(info.value)
    assert message.startswith(
        "script transform 't': row 3 of 4 in the batch: RangeError: amount too large: 31.5; "
        "stack: at check (script:3) / at process (script:5); input row: "
    )
    assert message.endswith("…") and len(message.split("; input row: ")[1]) == 300
    assert '; input row: {"id": 3, "amount": 31.5, "name": "xxx' in message
    assert "\n" not in message


def test_throwing_a_non_error() -> None:
    with pytest.raises(StreamlingError, match=r'row 1 of 1 in the batch: threw "nope" \(not an Error, so no stack\)'):
        run("function f(row) { throw 'nope'; }", rows(1))


def test_without_schema_keys_outside_the_input_are_rejected() -> None:
    script = "function process(input) {\n  input.tier = 'gold';\n  return input;\n}"
    with pytest.raises(StreamlingError) as info:
        run(script, rows(2))
    assert str(info.value).startswith(
        "script transform 't': row 1 of 2 in the batch: the script returned 'tier', which is not among the output "
        "columns (id, amount, name); without 'schema' the output columns are the input's and those the script added "
        "on the sample rows at validation: declare every output column in 'schema'; input row: "
    )


def test_without_schema_values_keep_the_input_types() -> None:
    script = "function f(row) { row.amount = String(row.amount * 2); row.name = row.id; return row; }"
    assert run(script, rows(1)) == [{"id": 1, "amount": 21.0, "name": "1", GS_OP: "i"}]


# ---------------------------------------------------------------- Arrow round trip


def test_every_type_round_trips_unchanged() -> None:
    schema = T.StructType(
        [
            T.StructField("i8", T.ByteType()),
            T.StructField("i16", T.ShortType()),
            T.StructField("i32", T.IntegerType()),
            T.StructField("i64", T.LongType()),
            T.StructField("f32", T.FloatType()),
            T.StructField("f64", T.DoubleType()),
            T.StructField("s", T.StringType()),
            T.StructField("b", T.BooleanType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("d", T.DateType()),
            T.StructField("dec", T.DecimalType(20, 4)),
            T.StructField("bin", T.BinaryType()),
            T.StructField("arr", T.ArrayType(T.LongType())),
            T.StructField("st", T.StructType([T.StructField("x", T.StringType())])),
            T.StructField("m", T.MapType(T.StringType(), T.LongType())),
            T.StructField(GS_OP, T.StringType(), False),
        ]
    )
    full = {
        "i8": -128,
        "i16": 32767,
        "i32": -5,
        "i64": 2**53,
        "f32": 1.5,
        "f64": float("nan"),
        "s": 'héllo "quoted" \n ✓',
        "b": False,
        "ts": dt.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC),
        "ntz": dt.datetime(2025, 1, 2, 3, 4, 5, 1),
        "d": dt.date(1999, 12, 31),
        "dec": Decimal("1234567890123456.7891"),
        "bin": b"\x00\xffabc",
        "arr": [1, None, 3],
        "st": {"x": "y"},
        "m": {"k": 1},
        GS_OP: "u",
    }
    empty = {name: None for name in full} | {GS_OP: "i"}
    batch = pa.RecordBatch.from_pylist([full, empty], schema=_arrow_schema(schema, "UTC"))
    out = program("function same(row) { return row; }", schema=schema).process(batch)
    assert out.schema == batch.schema
    for name in full:
        if name == "f64":
            assert str(out.column(name).to_pylist()) == "[nan, None]"
        elif name == "m":
            assert out.column(name).to_pylist() == [[("k", 1)], None]
        else:
            assert out.column(name).to_pylist() == batch.column(name).to_pylist(), name


def test_values_the_script_sees() -> None:
    schema = T.StructType(
        [
            T.StructField("ts", T.TimestampType()),
            T.StructField("d", T.DateType()),
            T.StructField("dec", T.DecimalType(10, 2)),
            T.StructField("bin", T.BinaryType()),
            T.StructField("n", T.LongType()),
            T.StructField("ok", T.BooleanType()),
            T.StructField(GS_OP, T.StringType(), False),
        ]
    )
    data = [
        {
            "ts": dt.datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
            "d": dt.date(2025, 1, 2),
            "dec": Decimal("12.30"),
            "bin": b"hi",
            "n": None,
            "ok": None,
            GS_OP: "d",
        }
    ]
    script = "function show(row) { return {s: JSON.stringify(row) + ' ' + new Date(row.ts).getTime()}; }"
    (out,) = run(script, data, schema=schema, out=T.StructType([T.StructField("s", T.StringType())]))
    shown, millis = out["s"].rsplit(" ", 1)
    assert json.loads(shown) == {
        "ts": "2025-01-02T03:04:05.000006Z",
        "d": "2025-01-02",
        "dec": "12.30",
        "bin": "aGk=",
        "n": None,
        "ok": None,
        GS_OP: "d",
    }
    assert int(millis) == 1735787045000


def test_awkward_column_names() -> None:
    schema = T.StructType(
        [
            T.StructField("__proto__", T.StringType()),
            T.StructField("with space", T.LongType()),
            T.StructField('quo"te', T.BooleanType()),
            T.StructField(GS_OP, T.StringType(), False),
        ]
    )
    data = [{"__proto__": "p", "with space": 1, 'quo"te': True, GS_OP: "i"}]
    script = "function f(row) { row['with space'] += 1; row['__proto__'] = row['__proto__'] + '!'; return row; }"
    assert run(script, data, schema=schema) == [{"__proto__": "p!", "with space": 2, 'quo"te': True, GS_OP: "i"}]


def test_many_output_rows_grow_the_buffers() -> None:
    script = (
        "function f(row) { const out = []; for (let i = 0; i < 50; i++) out.push({id: row.id * 100 + i}); return out; }"
    )
    out = run(script, rows(30), out=T.StructType([T.StructField("id", T.LongType())]))
    assert [r["id"] for r in out] == [i * 100 + k for i in range(1, 31) for k in range(50)]


def test_rebatch_hands_the_sandbox_fixed_size_batches() -> None:
    batches = [batch_of(rows(n)) for n in (3, 10, 1, 7)]
    assert [b.num_rows for b in rebatch(iter(batches), 4)] == [4, 4, 4, 4, 4, 1]
    assert [b.num_rows for b in rebatch(iter([batch_of(rows(4))]), 4)] == [4]
    ids = [i for b in rebatch(iter(batches), 4) for i in b.column("id").to_pylist()]
    assert ids == [i for b in batches for i in b.column("id").to_pylist()]


def test_sandboxes_are_reused_per_script_and_limits() -> None:
    spec = codec.spec_of(codec.columns_of(ROWS), codec.columns_of(ROWS), True)
    first = sandbox_for("row => row", spec, Limits(1000, 64))
    assert sandbox_for("row => row", spec, Limits(1000, 64)) is first
    assert sandbox_for("row => row", spec, Limits(2000, 64)) is not first


# ---------------------------------------------------------------- TypeScript


TS = """interface Row {
  id: number;
  amount: number;
  tier?: Tier;
}
type Tier = 'premium' | 'standard';

function process(input: Row): Row | null {
  const tier: Tier = input.amount > 1000 ? 'premium' : 'standard';
  return {...input, tier} as Row;
}"""


def test_typescript_keeps_line_numbers() -> None:
    js = typescript.transpile(TS)
    assert js.count("\n") == TS.count("\n")
    assert js.splitlines()[7] == "function process(input) {"
    with pytest.raises(ScriptSyntaxError, match=r"^SyntaxError: Unexpected token at line 3, column 11$"):
        typescript.transpile("function f(x: number) {\n  let y: number = 1;\n  let z = ;\n}")


def test_typescript_without_the_bundle_says_where_it_is_expected(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(typescript.BUNDLE_ENV, str(tmp_path / "none.js"))
    monkeypatch.setattr(typescript, "_sandbox", None)
    typescript.transpile.cache_clear()
    with pytest.raises(typescript.TypeScriptUnavailable) as info:
        typescript.transpile("function f(x: number) { return x; }")
    assert str(info.value) == (
        f"language 'typescript' needs the Sucrase bundle at {tmp_path / 'none.js'}, which does not exist; run "
        f"`./dev setup` (it bundles Sucrase from npm) or point STREAMLING_SUCRASE_BUNDLE at a bundle"
    )
    monkeypatch.undo()
    monkeypatch.setattr(typescript, "_sandbox", None)
    typescript.transpile.cache_clear()


def test_the_sandbox_works_from_the_zip_shipped_to_cluster_executors(tmp_path) -> None:
    """On a cluster the package reaches executors as a zip (`spark/session.py`): runner.js is read from it."""
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    import streamling

    package = Path(streamling.__file__).parent
    archive = tmp_path / "streamling.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                out.write(path, Path("streamling") / path.relative_to(package))
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import streamling.script.sandbox as s; "
        "assert s.__file__.startswith(sys.argv[1]), s.__file__; "
        "box = s.Sandbox(s.Limits(5000, 64)); box.load('row => row'); print(box.call('typeof __streamling_batch', {}))"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", probe, str(archive)], env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "function", result.stderr


WIDE = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("small", T.ByteType()),
        T.StructField("price", T.DecimalType(4, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("raw", T.BinaryType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("attrs", T.MapType(T.StringType(), T.IntegerType())),
        T.StructField("point", T.StructType([T.StructField("x", T.DoubleType())])),
        T.StructField(GS_OP, T.StringType(), False),
    ]
)


def test_inference_sees_every_input_type_as_a_batch_would() -> None:
    """The sample rows cross as a batch's rows do: each kind of input value reaches the script, and each added
    key is typed from its JavaScript values (numbers as double, objects as JSON text)."""
    from streamling.script.inference import infer_columns, sample_batch

    assert sample_batch(WIDE).to_pylist()[2]["id"] == 1  # not nullable: the first row's value, never NULL
    script = """row => row.id > 1 ? null : ({...row,
      n: row.small + Number(row.price), d: row.day + '', y: new Date(row.at).getUTCFullYear(),
      b: row.raw.length, t: row.tags[0], a: row.attrs.sample, x: row.point.x, o: {tags: row.tags},
      big: BigInt(row.id), when: new Date(row.at), ok: !row.tags})"""
    inferred = infer_columns("script transform 't'", script, WIDE, Limits(10_000, 64))
    added = {f.name: f.dataType.simpleString() for f in inferred.fields[len(WIDE.fields) - 1 :]}
    assert added == {
        "n": "double",
        "d": "string",
        "y": "double",
        "b": "double",
        "t": "string",
        "a": "double",
        "x": "double",
        "o": "string",
        "big": "bigint",
        "when": "timestamp",
        "ok": "boolean",
    }
    assert [f.name for f in inferred.fields[: len(WIDE.fields) - 1]] == [f.name for f in WIDE.fields[:-1]]
    assert inferred.warning is None


def test_inference_probe_reports_each_rows_outcome() -> None:
    sandbox = Sandbox(Limits(10_000, 64))
    try:
        sandbox.load(
            "row => row.id === 1 ? [row, null, {k: [1]}] : row.id === 2 ? 7 : (() => { throw new Error('x'); })()"
        )
        inputs = codec.columns_of(ROWS)
        batch = batch_of(
            [
                {"id": 1, "amount": 1.0, "name": "a", GS_OP: "i"},
                {"id": 2, "amount": 1.0, "name": "b"},
                {"id": 3, "amount": None, "name": None},
            ]
        )
        rows = sandbox.probe(codec.spec_of(inputs, [], False), codec.encode(batch, inputs))
    finally:
        sandbox.close()
    assert rows[0] == {
        "objects": [[["id", "number"], ["amount", "number"], ["name", "string"], [GS_OP, "string"]], [["k", "json"]]]
    }
    assert rows[1] == {"shape": "returned a number; return an object, an array of objects, or null"}
    assert rows[2]["error"][:2] == ["Error", "x"]
