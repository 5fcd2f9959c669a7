"""Benchmark: the SQL functions implemented in Python (Arrow) against a Spark built-in on the same data.

    .venv/bin/python bench/sql_functions.py [--rows N] [--runs K] [--only NAME ...] [--results DIR]

In-process, on one core (``local[1]``): a DataFrame of N rows of fixed-width inputs (32-byte values as 0x-hex text
and as bytes, their Base58 form, 256-bit integers as decimal text, JSON documents) is cached, then each function is
evaluated over every row the way a ``sql`` transform does (the SQL parsed, rewritten and rendered by SqlProgram, the
Arrow functions registered) and written to Spark's ``noop`` sink, so nothing is pruned. For each function:

- **rows/s in Spark** and **µs/row** (one core; the best of the counted runs), next to a Spark built-in doing
  comparable work on the same rows (a hash: ``sha2``/``xxhash64``; an addition: ``DECIMAL(38,0)`` arithmetic) —
  the difference is what the Python path costs, Arrow transfer to the Python worker included;
- **µs/row in the function itself**: the Arrow function called directly on the same Arrow arrays, no Spark —
  the figure the ≤ 1 µs/row target is about.

The figures are printed and recorded in ``results/sql_functions-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT / "engine")]
from harness import RESULTS, record  # noqa: E402


@dataclass(frozen=True)
class Case:
    family: str
    expression: str
    """A catalogue function over the data's columns."""
    baseline: str
    """A Spark built-in doing comparable work on the same columns (plain Spark SQL, never rewritten)."""
    arrow: str | None = None
    """The Arrow function's name, when it is one (its direct cost is measured too)."""
    columns: tuple[str, ...] = ()
    """The columns the Arrow function is called with directly."""


CASES = [
    Case("Bytes and hashes", "_gs_keccak256(hex32)", "sha2(hex32, 256)", "_gs_keccak256", ("hex32",)),
    Case("Bytes and hashes", "_gs_keccak256(text)", "sha2(text, 256)", "_gs_keccak256", ("text",)),
    Case("Bytes and hashes", "_gs_xxhash(hex32)", "xxhash64(hex32)", "_gs_xxhash", ("hex32",)),
    Case("Bytes and hashes", "_gs_from_base58(b58)", "unbase64(b64)", "_gs_from_base58", ("b58",)),
    Case("Bytes and hashes", "reverse_bytes32(bytes32)", "reverse(hex32)", "reverse_bytes32", ("bytes32",)),
    Case("Bytes and hashes", "uuid7()", "uuid()", "uuid7", ()),
    Case(
        "Bytes and hashes",
        "_gs_conv_base(substr(hex32, 3, 16), '16', '10')",
        "conv(substr(hex32, 3, 15), 16, 10)",
        None,
    ),
    Case("Strings", "regexp_extract(text, '#([0-9]+)', 1)", "regexp_extract(text, '#([0-9]+)', 1)", None),
    Case("Strings", "regexp_replace(text, 'address', 'addr')", "replace(text, 'address', 'addr')", None),
    Case(
        "Wide integers",
        "u256_add(u1, u2)",
        "CAST(d1 AS DECIMAL(38,0)) + CAST(d2 AS DECIMAL(38,0))",
        "u256_add",
        ("u1", "u2"),
    ),
    Case(
        "Wide integers",
        "u256_mul(u3, small)",
        "try_multiply(CAST(d1 AS DECIMAL(38,0)), CAST(small AS DECIMAL(38,0)))",
        "u256_mul",
        ("u3", "small"),
    ),
    Case("Wide integers", "to_u256(hex32)", "conv(substr(hex32, 3, 15), 16, 10)", "to_u256", ("hex32",)),
    Case(
        "Arbitrary-precision decimals",
        "decimal_arb_add(to_decimal_arb(f1, 38, 18), to_decimal_arb(f2, 38, 18))",
        "CAST(f1 AS DECIMAL(38,18)) + CAST(f2 AS DECIMAL(38,18))",
        "decimal_arb_add",
        ("f1", "f2"),
    ),
    Case("JSON", "json_quote(text)", "to_json(named_struct('v', text))", "json_quote", ("text",)),
    Case(
        "JSON",
        "json_object('k', text, 'n', small)",
        "to_json(named_struct('k', text, 'n', small))",
        "json_object",
        ("text", "small"),
    ),
    Case("JSON", "json_value(doc, '$.from')", "get_json_object(doc, '$.from')", "json_value", ("doc", "path")),
]


def data(spark, rows: int):
    """N rows of fixed-width inputs, built in Python once and cached by Spark."""
    import base64
    import random

    import based58
    import pyarrow as pa
    from pyspark.sql import functions as F

    rng = random.Random(7)
    raw = [rng.randbytes(32) for _ in range(min(rows, 100_000))]
    repeat = -(-rows // len(raw))
    words = [raw[i % len(raw)] for i in range(rows)] if repeat > 1 else raw[:rows]
    u = [int.from_bytes(w, "big") >> 2 for w in words]  # 254-bit: the sum of two never overflows
    table = pa.table(
        {
            "bytes32": pa.array(words, pa.binary()),
            "hex32": pa.array(["0x" + w.hex() for w in words]),
            "text": pa.array([f"Transfer(address,address,uint256)#{i}" for i in range(rows)]),
            "b58": pa.array([based58.b58encode(w).decode() for w in words]),
            "b64": pa.array([base64.b64encode(w).decode() for w in words]),
            "u1": pa.array([str(v) for v in u]),
            "u2": pa.array([str(v >> 3) for v in u]),
            "u3": pa.array([str(v >> 16) for v in u]),  # times a number under 1000 stays in range
            "d1": pa.array([str(v % 10**37) for v in u]),
            "d2": pa.array([str((v >> 3) % 10**37) for v in u]),
            "f1": pa.array([f"{v % 10**19}.{v % 10**18:018d}" for v in u]),
            "f2": pa.array([f"{(v >> 5) % 10**19}.{(v >> 7) % 10**18:018d}" for v in u]),
            "small": pa.array([i % 1000 for i in range(rows)], pa.int64()),
            "doc": pa.array(
                [
                    f'{{"from": "0x{w[:20].hex()}", "value": {v % 10**6}.5, "tags": ["a"], "n": {i}}}'
                    for i, (w, v) in enumerate(zip(words, u, strict=True))
                ]
            ),
            "path": pa.array(["$.from"] * rows),
        }
    )
    # createDataFrame cuts an Arrow table into 10,000-row partitions, and every task pays tens of ms to start its
    # Python worker's UDF: one partition per core is what an epoch gives a core, and what is measured here
    df = spark.createDataFrame(table).withColumn("_gs_op", F.lit("i")).repartition(1).cache()
    df.count()
    return df, table


def spark_seconds(spark, df, expression: str, runs: int, catalogue: bool = True) -> float:
    """The best wall time over `runs` of evaluating `expression` for every row into the noop sink: as a ``sql``
    transform would (catalogue functions rewritten and registered), or as plain Spark SQL (the baselines)."""
    from streamling.plugins import functions as plugin_functions
    from streamling.sql.rewrite import SqlProgram

    df.createOrReplaceTempView("bench_t")
    rendered = f"SELECT {expression} AS v FROM bench_t"
    if catalogue:
        program = SqlProgram(f"SELECT {expression} AS v FROM t", "bench")
        rendered = program.render({"t": "bench_t"})
        plugin_functions.register_all(spark, program.called)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        spark.sql(rendered).select("v").write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - start)
    return best


def arrow_seconds(case: Case, table, runs: int) -> float | None:
    """The best time of calling the Arrow function directly on the data's Arrow columns."""
    from streamling.sql.functions.catalogue import ARROW

    if case.arrow is None or case.arrow not in ARROW:
        return None
    function = ARROW[case.arrow]()
    args = [table.column(c).combine_chunks() for c in case.columns]
    if not args:  # a function of no arguments still produces one value per row
        return None
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        function(*args)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--rows", type=int, default=1_000_000)
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--only", nargs="*", default=None, help="function names to run (default: all)")
    args.add_argument("--results", type=Path, default=RESULTS)
    opts = args.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from streamling.config.model import SparkSettings
    from streamling.spark.session import build_session

    spark = build_session(SparkSettings(master="local[1]", shuffle_partitions=1))
    spark.sparkContext.setLogLevel("ERROR")
    df, table = data(spark, opts.rows)
    results = []
    for case in CASES:
        name = case.expression.split("(")[0]
        if opts.only and name not in opts.only:
            continue
        try:
            spark_seconds(spark, df, case.expression, 1)  # warm-up: Python workers, registration
            ours = spark_seconds(spark, df, case.expression, opts.runs)
            base = spark_seconds(spark, df, case.baseline, opts.runs, catalogue=False)
        except Exception as exc:  # one broken case must not hide the others' figures
            print(f"{case.expression}: FAILED {str(exc).splitlines()[0]}", flush=True)
            results.append({"family": case.family, "function": case.expression, "error": str(exc).splitlines()[0]})
            continue
        direct = arrow_seconds(case, table, opts.runs)
        row = {
            "family": case.family,
            "function": case.expression,
            "baseline": case.baseline,
            "rows_per_sec": round(opts.rows / ours),
            "us_per_row": round(ours / opts.rows * 1e6, 3),
            "baseline_rows_per_sec": round(opts.rows / base),
            "baseline_us_per_row": round(base / opts.rows * 1e6, 3),
            "function_us_per_row": None if direct is None else round(direct / opts.rows * 1e6, 3),
        }
        results.append(row)
        direct_text = "—" if direct is None else f"{row['function_us_per_row']:.3f}"
        print(
            f"{case.expression:<40} {row['rows_per_sec']:>10,} rows/s ({row['us_per_row']:.3f} µs/row) | "
            f"{case.baseline:<55} {row['baseline_rows_per_sec']:>10,} rows/s ({row['baseline_us_per_row']:.3f}) | "
            f"function alone {direct_text} µs/row",
            flush=True,
        )
    path = record("sql_functions", {"rows": opts.rows, "master": "local[1]", "results": results}, opts.results)
    print(f"-> {path}")
    spark.stop()


if __name__ == "__main__":
    main()
