"""Reading one file of a format into Arrow, and inferring the columns a set of files has.

A file is read whole with pyarrow's readers (Avro with fastavro) and conformed to the source's schema: columns
by name, cast to the inferred type, NULL where a file lacks one, Hive partition values and the constant
``_gs_op = 'i'`` added. A CSV or JSON file pyarrow cannot read is read again line by line (`lines.py`) to name
the first bad line, pyarrow's messages counting rows within a block, which is no place a user can find; or, with
dead letters, to read the file without its bad lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, first_line
from streamling.files.lines import BadLine, scan

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


def file_schema(fs: pafs.FileSystem, entry: FileEntry, fmt: str, dead_letters: bool = False) -> pa.Schema:
    """The columns of one file, as its format's reader infers them; with `dead_letters`, of a CSV or JSON file's
    readable lines when its reader rejects some."""
    try:
        with fs.open_input_file(entry.path) as stream:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.read_schema(stream)
            if fmt == "avro":
                return _avro_schema(stream)
            content = stream.read()
        try:
            return _text_schema(content, fmt)
        except pa.ArrowException:
            good, bad = scan(content, fmt, pa.schema([]), first_only=not dead_letters)
            if bad and not dead_letters:
                raise StreamlingError.user(
                    f"{entry.path}: cannot read its columns as {fmt}: line {bad[0].line}: {bad[0].error}"
                ) from None
            if not bad:
                raise
            return _text_schema(good, fmt)
    except StreamlingError:
        raise
    except Exception as exc:
        raise StreamlingError.user(f"{entry.path}: cannot read its columns as {fmt}: {first_line(exc)}") from None


def _text_schema(content: bytes, fmt: str) -> pa.Schema:
    if fmt == "csv":
        import pyarrow.csv as pcsv

        return pcsv.open_csv(pa.BufferReader(content)).schema
    import pyarrow.json as pjson

    return pjson.open_json(pa.BufferReader(content)).schema


def infer_schema(fs: pafs.FileSystem, files: Sequence[FileEntry], fmt: str, dead_letters: bool = False) -> pa.Schema:
    """The data columns of `files`: the schemas of the first `SCHEMA_SAMPLE_FILES` by path, unified column by
    column (an integer column that is fractional in another file becomes a double); a column whose types cannot
    be unified is read as a string, as Spark's inference does for CSV and JSON."""
    sample = sorted(files, key=lambda e: e.path)[:SCHEMA_SAMPLE_FILES]
    types: dict[str, list[pa.DataType]] = {}
    for schema in (file_schema(fs, entry, fmt, dead_letters) for entry in sample):
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
    dead_letters: bool,
) -> tuple[pa.Table, list[BadLine]]:
    """The rows of one file conformed to `target` (the source's Arrow schema); `partition_columns` are the columns
    that come from Hive-style folders rather than from the files. A CSV or JSON file the reader rejects fails
    naming its first bad line, or with `dead_letters` is read without its bad lines, which are returned."""
    data = pa.schema([f.with_nullable(True) for f in target if f.name not in partition_columns])
    bad: list[BadLine] = []
    try:
        table = _read(fs, entry.path, fmt, data)
    except StreamlingError:
        raise
    except (pa.ArrowException, ValueError) as exc:
        if fmt not in ("csv", "json"):
            raise StreamlingError.user(f"{entry.path}: {first_line(exc)}") from None
        with fs.open_input_file(entry.path) as stream:
            content = stream.read()
        good, bad = scan(content, fmt, data, first_only=not dead_letters)
        if not bad:
            raise StreamlingError.user(f"{entry.path}: {first_line(exc)}") from None
        if not dead_letters:
            raise StreamlingError.user(f"{entry.path}: line {bad[0].line}: {bad[0].error}") from None
        table = _read_bytes(good, fmt, data)
    try:
        values = dict(entry.partition)
        return conform(table, target, {k: values.get(k) for k in partition_columns}), bad
    except (pa.ArrowException, ValueError) as exc:
        problem = first_line(exc)
        raise StreamlingError.user(f"{entry.path}: its columns do not fit the source's schema: {problem}") from None


def _read(fs: pafs.FileSystem, path: str, fmt: str, data: pa.Schema) -> pa.Table:
    with fs.open_input_file(path) as stream:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(stream).read()  # not pq.read_table: its dataset layer imports pandas
        if fmt == "avro":
            return _read_avro(stream, data)
        return _read_bytes(stream.read(), fmt, data)


def _read_bytes(content: bytes, fmt: str, data: pa.Schema) -> pa.Table:
    """A CSV or JSON file's content read against the source's data columns."""
    if fmt == "csv":
        import pyarrow.csv as pcsv

        if not content.strip():
            return pa.table({f.name: pa.array([], f.type) for f in data})
        header = pcsv.open_csv(pa.BufferReader(content)).schema.names
        types = {f.name: f.type for f in data if f.name in header}
        return pcsv.read_csv(pa.BufferReader(content), convert_options=pcsv.ConvertOptions(column_types=types))
    import pyarrow.json as pjson

    if not content.strip():
        return pa.table({f.name: pa.array([], f.type) for f in data})
    options = pjson.ParseOptions(explicit_schema=data, unexpected_field_behavior="ignore")
    return pjson.read_json(pa.BufferReader(content), parse_options=options)


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
            strings = pa.nulls(n, pa.string()) if value is None else repeated(value, n)
            columns.append(strings.cast(field.type))
        elif field.name == GS_OP:
            columns.append(repeated("i", n))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def repeated(value: str, n: int) -> pa.Array | pa.ChunkedArray:
    """`n` copies of `value` as a string array, built from its buffers. ``pa.array([value] * n)`` took ~11 ms per
    500k rows, and a worker's first array built from Python values imports pandas (~0.2 s, pyarrow's shim)."""
    import numpy as np

    data = value.encode()
    if n * len(data) >= 2**31:  # beyond a string array's 32-bit offsets: pyarrow chunks it
        return pa.array([value] * n, pa.string())
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


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
