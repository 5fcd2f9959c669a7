"""pipelines/token_transfers.yaml through the `streamling` CLI: the original's SQL functions as a user calls them
(docs/transforms.md's wei-to-ether division, the documented Transfer topic hash, `::VARCHAR`, `REGEXP(...)` in WHERE)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import xxhash

from tests.e2e.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
PRINTED = re.compile(r"^\d+ -> \(sample_every=1\) \[Insert\] (\{.*\})$")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


def test_the_token_transfers_example_prints_exact_values(tmp_path: Path) -> None:
    result = run_cli(tmp_path, str(REPO / "pipelines" / "token_transfers.yaml"), env={"STREAMLING__JOB_MODE": "true"})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(PRINTED.match(line).group(1)) for line in result.stdout.splitlines()]
    assert rows, result.stdout
    for row in rows:
        assert re.match("^[a-e]", row["who"]), row
        assert row["wei"] == str(row["id"] * 1_500_000_000_000_000_000)
        assert row["eth"] == str(row["id"] * 3 // 2)
        assert row["topic"] == TRANSFER_TOPIC
        assert row["unique_id"] == xxhash.xxh3_128_hexdigest(f"{row['who']}_{row['id']}".encode())
        assert row["domain"] == "example.com"
        assert row["name_length"] == len(row["who"])
    assert "sink 'print_transfers': " + f"{len(rows)} rows written" in result.stderr
