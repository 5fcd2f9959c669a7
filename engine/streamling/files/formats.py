"""Reading one file of a format into Arrow, and inferring the columns a set of files has.

A file is read whole with pyarrow's readers (Avro with fastavro) and conformed to the source's schema: columns
by name, cast to the inferred type, NULL where a file lacks one, Hive partition values and the constant
``_gs_op = 'i'`` added. A CSV or JSON file pyarrow cannot read is read again line by line to name the first bad
line: pyarrow's messages count rows within a block, which is no place a user can find.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamling.errors import StreamlingError
from streamling.types import GS_OP

if TYPE_CHECKING:
    from pyarrow import fs as pafs

    from streamling.files.listing import FileEntry

SCHEMA_SAMPLE_FILES = 8
"""How many files (the first by path) the schema is inferred from; their columns are unified."""


def normalise(t: pa.DataType) -> pa.DataType:
    """An Arrow type a Spark column can hold: unsigned integers widened (``uint64`` as ``decimal(20,0)``),
    dictionaries as their values, large strings and binaries as plain ones, timestamps in microseconds."""
    if pa.types.is_dictionary(t):
        return normalise(t.value_type)
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(t.bit_width, pa.decimal128(20, 0))
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(normalise(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normalise(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(normalise(t.key_type), normalise(t.item_type))
    return t


def file_schema(fs: pafs.FileSystem, entry: FileEntry, fmt: str) -> pa.Schema:
    """The columns of one file, as its format's reader infers them."""
    try:
        with fs.open_input_file(entry.path) as stream:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.read_schema(stream)
            if fmt == "csv":
                import pyarrow.csv as pcsv

                return pcsv.open_csv(stream).schema
            if fmt == "json":
                import pyarrow.json as pjson

                return pjson.open_json(stream).schema
            return _avro_schema(stream)
    except StreamlingError:
        raise
    except Exception as exc:
        where = _where(fs, entry.path, fmt, pa.schema([])) if isinstance(exc, pa.ArrowException) else None
        raise StreamlingError.user(f"{entry.path}: cannot read its columns as {fmt}: {where or _line(exc)}") from None


def infer_schema(fs: pafs.FileSystem, files: Sequence[FileEntry], fmt: str) -> pa.Schema:
    """The data columns of `files`: the schemas of the first `SCHEMA_SAMPLE_FILES` by path, unified column by
    column (an integer column that is fractional in another file becomes a double); a column whose types cannot
    be unified is read as a string, as Spark's inference does for CSV and JSON."""
    sample = sorted(files, key=lambda e: e.path)[:SCHEMA_SAMPLE_FILES]
    types: dict[str, list[pa.DataType]] = {}
    for schema in (file_schema(fs, entry, fmt) for entry in sample):
        for field in schema:
            types.setdefault(field.name, []).append(field.type)
    return pa.schema([pa.field(name, normalise(_unified(found))) for name, found in types.items()])


def _unified(found: Sequence[pa.DataType]) -> pa.DataType:
    try:
        schema = pa.unify_schemas([pa.schema([("c", t)]) for t in found], promote_options="permissive")
    except (pa.ArrowException, TypeError):
        return pa.string()
    return schema.field("c").type


def read_file(
    fs: pafs.FileSystem,
    entry: FileEntry,
    fmt: str,
    target: pa.Schema,
    partition_columns: Sequence[str],
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """The rows of one file conformed to `target` (the source's Arrow schema), in batches of at most `batch_rows`;
    `partition_columns` are the columns that come from Hive-style folders rather than from the files."""
    data = pa.schema([f.with_nullable(True) for f in target if f.name not in partition_columns])
    try:
        table = _read(fs, entry.path, fmt, data)
    except StreamlingError:
        raise
    except (pa.ArrowException, ValueError) as exc:
        raise StreamlingError.user(f"{entry.path}: {_where(fs, entry.path, fmt, data) or _line(exc)}") from None
    try:
        values = dict(entry.partition)
        conformed = conform(table, target, {k: values.get(k) for k in partition_columns})
    except (pa.ArrowException, ValueError) as exc:
        raise StreamlingError.user(f"{entry.path}: its columns do not fit the source's schema: {_line(exc)}") from None
    yield from conformed.to_batches(max_chunksize=batch_rows)


def _read(fs: pafs.FileSystem, path: str, fmt: str, data: pa.Schema) -> pa.Table:
    with fs.open_input_file(path) as stream:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(stream)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            header = pcsv.open_csv(stream).schema.names
            stream.seek(0)
            types = {f.name: f.type for f in data if f.name in header}
            return pcsv.read_csv(stream, convert_options=pcsv.ConvertOptions(column_types=types))
        if fmt == "json":
            import pyarrow.json as pjson

            options = pjson.ParseOptions(explicit_schema=data, unexpected_field_behavior="ignore")
            return pjson.read_json(stream, parse_options=options)
        return _read_avro(stream, data)


def conform(table: pa.Table, target: pa.Schema, partition: dict[str, str | None]) -> pa.Table:
    """`table`'s columns by name in `target`'s order and types; partition values, ``_gs_op`` and NULLs added. A
    file's NULL ``_gs_op`` (or a JSON line without one) is an insert, as the sinks read it."""
    import pyarrow.compute as pc

    n = table.num_rows
    columns = []
    for field in target:
        if field.name == GS_OP and GS_OP in table.column_names:
            columns.append(pc.fill_null(table.column(GS_OP).cast(pa.string()), "i"))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        elif field.name in partition:
            value = partition[field.name]
            columns.append(pa.array([value] * n, pa.string()).cast(field.type))
        elif field.name == GS_OP:
            columns.append(pa.array(["i"] * n, pa.string()))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def _where(fs: pafs.FileSystem, path: str, fmt: str, data: pa.Schema) -> str | None:
    """The first line of a CSV or JSON file its reader rejects, and why; None when no single line is at fault."""
    if fmt not in ("csv", "json"):
        return None
    with fs.open_input_file(path) as stream:
        text = io.TextIOWrapper(io.BytesIO(stream.read()), encoding="utf-8", errors="replace", newline="")
    return _csv_line(text, data) if fmt == "csv" else _json_line(text, data)


def _json_line(text: io.TextIOWrapper, data: pa.Schema) -> str | None:
    import pyarrow.json as pjson

    options = pjson.ParseOptions(explicit_schema=data, unexpected_field_behavior="ignore")
    for number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            return f"line {number}: not valid JSON: {exc.msg} (column {exc.colno})"
        if not isinstance(value, dict):
            return f"line {number}: not a JSON object"
        try:
            pjson.read_json(io.BytesIO(line.encode()), parse_options=options)
        except pa.ArrowException as exc:
            return f"line {number}: {_line(exc)}"
    return None


def _csv_line(text: io.TextIOWrapper, data: pa.Schema) -> str | None:
    import pyarrow.csv as pcsv

    rows = csv.reader(text)
    header = next(rows, None)
    if header is None:
        return None
    types = {f.name: f.type for f in data if f.name in header}
    options = pcsv.ConvertOptions(column_types=types)
    for record in rows:
        number = rows.line_num
        if len(record) != len(header):
            return f"line {number}: expected {len(header)} columns, got {len(record)}"
        out = io.StringIO()
        csv.writer(out).writerows([header, record])
        try:
            pcsv.read_csv(io.BytesIO(out.getvalue().encode()), convert_options=options)
        except pa.ArrowException as exc:
            return f"line {number}: {_line(exc)}"
    return None


def _avro_schema(stream: Any) -> pa.Schema:
    import fastavro
    from pyspark.sql.pandas.types import to_arrow_schema

    from streamling.kafka.avro import spark_schema

    writer = fastavro.reader(stream).writer_schema
    return to_arrow_schema(spark_schema(writer, "avro file"), timezone="UTC")


def _read_avro(stream: Any, data: pa.Schema) -> pa.Table:
    import fastavro

    records = list(fastavro.reader(stream))
    names = [f.name for f in data]
    return pa.Table.from_pylist([{k: r.get(k) for k in names} for r in records], schema=data)


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
