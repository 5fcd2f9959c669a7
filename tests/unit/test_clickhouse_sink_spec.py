"""The ClickHouse sink's YAML shape and type mapping: no ClickHouse, no Spark session."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pydantic import ValidationError
from pyspark.sql import types as T

from streamling.clickhouse.sink import ClickHouseSink, ClickHouseSinkSpec
from streamling.clickhouse.types import can_hold, ch_type, check_type_text, columns_of
from streamling.config.model import Settings
from streamling.kafka.avro import WIDE_DECIMAL_KEY
from streamling.topology.pipeline import _field_problem


def spec(**fields: Any) -> ClickHouseSinkSpec:
    return ClickHouseSinkSpec.model_validate({"type": "clickhouse", "from": "src", "table": "t", **fields})


def problems(**fields: Any) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        spec(**fields)
    return [_field_problem(e) for e in caught.value.errors()]


def test_defaults() -> None:
    """Compression, its level and the batch size are unset: the sink takes ``clickhouse_sink``'s (``none``, 6,
    100000 by default) for what its node leaves out."""
    s = spec()
    assert (s.append_only_mode, s.compression, s.compression_level, s.batch_size, s.schema_override) == (
        True,
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize("value", ["gzip", "GZIP", "Gzip", " zstd ", "LZ4", "None", "none"])
def test_compression_is_case_insensitive(value: str) -> None:
    assert spec(compression=value).compression == value.strip().lower()


def test_compression_level_and_flush_interval() -> None:
    s = spec(compression="gzip", compression_level=0, batch_size=500, batch_flush_interval="2s")
    assert (s.compression_level, s.batch_size, s.batch_flush_interval) == (0, 500, 2000)
    sink = ClickHouseSink("out", s, Settings())
    assert sink.flush_interval_sec == 2.0
    assert ClickHouseSink("out", spec(), Settings()).flush_interval_sec is None


def test_bad_compression_names_field_and_value() -> None:
    assert problems(compression="brotli") == [
        "field 'compression': Input should be 'none', 'gzip', 'zstd' or 'lz4' (got 'brotli')"
    ]


@pytest.mark.parametrize(
    ("level", "reason"),
    [
        (10, "Input should be less than or equal to 9"),
        (-1, "Input should be greater than or equal to 0"),
        ("high", "Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_bad_compression_level(level: object, reason: str) -> None:
    assert problems(compression="gzip", compression_level=level) == [
        f"field 'compression_level': {reason} (got {level!r})"
    ]


def test_unknown_field_is_rejected() -> None:
    assert problems(compresion="gzip") == ["unknown field 'compresion'"]


@pytest.mark.parametrize(
    "text",
    [
        "UInt256",
        "Decimal(18, 4)",
        "LowCardinality(String)",
        "Nullable(DateTime64(3, 'Europe/Berlin'))",
        "Enum8('a' = 1, 'b' = -2)",
        "Map(String, Array(Nullable(Float64)))",
        "Tuple(a Int64, b String)",
    ],
)
def test_schema_override_accepts_clickhouse_types(text: str) -> None:
    assert spec(schema_override={"c": text}).schema_override == {"c": text}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("String; DROP TABLE x", "allowed: letters"),
        ("String) ENGINE = Log --", "allowed: letters"),
        ("Int64 -- comment", "is not a ClickHouse type"),
        ("`Int64`", "allowed: letters"),
        ("Decimal(18, 4", "unbalanced parentheses"),
        ("Int64))((", "unbalanced parentheses"),
        ("DateTime64(3, 'UTC)", "allowed: letters"),
        ("", "is not a ClickHouse type"),
        ("1Int", "allowed: letters"),
    ],
)
def test_schema_override_rejects_unsafe_text(text: str, reason: str) -> None:
    (problem,) = problems(schema_override={"amount": text})
    assert problem.startswith("field 'schema_override': column 'amount': ")
    assert reason in problem


def test_check_type_text_normalises_whitespace() -> None:
    assert check_type_text("  Decimal(18,\n 4) ") == "Decimal(18, 4)"


@pytest.mark.parametrize(
    ("arrow", "expected"),
    [
        (pa.int8(), "Int8"),
        (pa.int16(), "Int16"),
        (pa.int32(), "Int32"),
        (pa.int64(), "Int64"),
        (pa.uint8(), "UInt8"),
        (pa.uint64(), "UInt64"),
        (pa.float32(), "Float32"),
        (pa.float64(), "Float64"),
        (pa.bool_(), "Bool"),
        (pa.string(), "String"),
        (pa.binary(), "String"),
        (pa.date32(), "Date32"),
        (pa.timestamp("us", tz="UTC"), "DateTime64(6, 'UTC')"),
        (pa.timestamp("us"), "DateTime64(6, 'UTC')"),
        (pa.decimal128(38, 18), "Decimal(38, 18)"),
        (pa.list_(pa.field("item", pa.int64(), nullable=True)), "Array(Nullable(Int64))"),
        (pa.list_(pa.field("item", pa.list_(pa.string()), nullable=True)), "Array(Array(Nullable(String)))"),
        (pa.map_(pa.string(), pa.int32()), "Map(String, Nullable(Int32))"),
        (
            pa.struct([pa.field("n", pa.string()), pa.field("odd name", pa.int64(), nullable=False)]),
            "Tuple(n Nullable(String), `odd name` Int64)",
        ),
    ],
)
def test_arrow_to_clickhouse(arrow: pa.DataType, expected: str) -> None:
    assert ch_type(arrow) == expected


def test_wide_decimals_are_exact() -> None:
    assert ch_type(pa.string(), "decimal(78,0)") == "String"
    assert ch_type(pa.string(), "decimal(60, 10)") == "Decimal(60, 10)"
    assert ch_type(pa.string(), "decimal(77,0)") == "String"


def test_columns_from_spark_schema_keys_not_nullable_overrides_win() -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), True),
            T.StructField("name", T.StringType(), True),
            T.StructField("wei", T.StringType(), True, metadata={WIDE_DECIMAL_KEY: "decimal(78,0)"}),
            T.StructField("tags", T.ArrayType(T.StringType()), True),
            T.StructField("at", T.TimestampType(), False),
            T.StructField("amount", T.DoubleType(), True),
            T.StructField("_gs_op", T.StringType(), True),
        ]
    )
    columns = columns_of(schema, ["id"], {"amount": "Decimal(18, 4)"}, skip=("_gs_op",))
    assert [(c.name, c.ch) for c in columns] == [
        ("id", "Int64"),
        ("name", "Nullable(String)"),
        ("wei", "Nullable(String)"),
        ("tags", "Array(Nullable(String))"),
        ("at", "DateTime64(6, 'UTC')"),
        ("amount", "Decimal(18, 4)"),
    ]


@pytest.mark.parametrize(
    ("existing", "required", "ok"),
    [
        ("Int64", "Int64", True),
        ("Nullable(Int64)", "Int32", True),
        ("Int16", "Int32", False),
        ("Int64", "UInt32", True),
        ("Int32", "UInt32", False),
        ("UInt64", "Int8", False),
        ("Decimal(20, 0)", "Int64", True),
        ("Float64", "Float32", True),
        ("Float32", "Float64", False),
        ("Decimal(38, 18)", "Decimal(18, 4)", True),
        ("Decimal(10, 2)", "Decimal(18, 4)", False),
        ("LowCardinality(Nullable(String))", "Nullable(String)", True),
        ("UInt256", "Nullable(String)", True),
        ("Int32", "Nullable(String)", False),
        ("DateTime64(6, 'UTC')", "DateTime64(6, 'UTC')", True),
        ("DateTime64(9)", "DateTime64(6, 'UTC')", True),
        ("DateTime", "DateTime64(6, 'UTC')", False),
        ("Date32", "Date32", True),
        ("Array(Nullable(Int64))", "Array(Nullable(Int64))", True),
        ("Array(Int32)", "Array(Nullable(Int64))", False),
    ],
)
def test_can_hold(existing: str, required: str, ok: bool) -> None:
    assert can_hold(existing, required) is ok


def test_check_reports_reserved_override_and_key_problems() -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("is_deleted", T.BooleanType(), True),
            T.StructField("_gs_op", T.StringType(), True),
        ]
    )
    sink = ClickHouseSink("out", spec(schema_override={"nope": "String", "id": "Nullable(Int64)"}), Settings())
    assert sink.check(schema, []) == ["clickhouse sink 'out' requires a primary key"]
    assert sink.check(schema, ["id"]) == [
        "clickhouse sink 'out': the input has a column 'is_deleted', which append_only_mode adds itself; "
        "rename it in a transform",
        "clickhouse sink 'out': schema_override column 'nope' is not in the input; available columns: id, is_deleted",
        "clickhouse sink 'out': schema_override makes key column 'id' Nullable(Int64); keys cannot be Nullable",
    ]
    assert ClickHouseSink("out", spec(append_only_mode=False), Settings()).check(schema, ["id"]) == []
