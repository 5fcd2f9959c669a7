"""CSV and JSON files line by line: which lines pyarrow's readers reject, and the file without them.

The fast path reads a whole file with pyarrow; only a file it rejects is scanned here, each record checked by the
same reader with the same options, so a line is bad here exactly when it made the file fail. The scan names the
first bad line (``on_error: fail``) or splits the file into its good content and its bad lines (dead letters).
Line numbers are 1-based, a CSV record spanning lines (a quoted newline) counted at its first line.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from streamling.errors import first_line


@dataclass(frozen=True)
class BadLine:
    line: int
    error: str
    raw: bytes


def scan(content: bytes, fmt: str, data: pa.Schema, first_only: bool) -> tuple[bytes, list[BadLine]]:
    """The content without its bad lines, and the bad lines (only the first with `first_only`)."""
    text = content.decode("utf-8", errors="replace")
    return _scan_csv(text, data, first_only) if fmt == "csv" else _scan_json(text, data, first_only)


def _scan_json(text: str, data: pa.Schema, first_only: bool) -> tuple[bytes, list[BadLine]]:
    import pyarrow.json as pjson

    options = pjson.ParseOptions(explicit_schema=data, unexpected_field_behavior="ignore")
    good: list[str] = []
    bad: list[BadLine] = []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if not line.strip():
            continue
        problem = None
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON: {exc.msg} (column {exc.colno})"
        else:
            if not isinstance(value, dict):
                problem = "not a JSON object"
            else:
                try:
                    pjson.read_json(io.BytesIO(line.encode()), parse_options=options)
                except pa.ArrowException as exc:
                    problem = first_line(exc)
        if problem is None:
            good.append(line if line.endswith("\n") else line + "\n")
            continue
        bad.append(BadLine(number, problem, line.rstrip("\r\n").encode()))
        if first_only:
            break
    return "".join(good).encode(), bad


def _scan_csv(text: str, data: pa.Schema, first_only: bool) -> tuple[bytes, list[BadLine]]:
    import pyarrow.csv as pcsv

    consumed: list[str] = []

    def physical() -> Iterator[str]:
        for line in text.splitlines(keepends=True):
            consumed.append(line)
            yield line

    rows = csv.reader(physical())
    header = next(rows, None)
    if header is None:
        return b"", []
    types = {f.name: f.type for f in data if f.name in header}
    options = pcsv.ConvertOptions(column_types=types)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    bad: list[BadLine] = []
    number = rows.line_num + 1
    consumed.clear()
    for record in rows:
        raw = "".join(consumed)
        consumed.clear()
        if not record:  # an empty line, which pyarrow's reader skips too
            number = rows.line_num + 1
            continue
        problem = None
        if len(record) != len(header):
            problem = f"expected {len(header)} columns, got {len(record)}"
        else:
            one = io.StringIO()
            csv.writer(one).writerows([header, record])
            try:
                pcsv.read_csv(io.BytesIO(one.getvalue().encode()), convert_options=options)
            except pa.ArrowException as exc:
                problem = first_line(exc)
        if problem is None:
            writer.writerow(record)
        else:
            bad.append(BadLine(number, problem, raw.rstrip("\r\n").encode()))
            if first_only:
                break
        number = rows.line_num + 1
    return out.getvalue().encode(), bad
