"""Fault injection: Kafka CDC → SQL → Postgres, the engine SIGKILLed at ten seeded random points, restarted each
time. The final table must equal the expected final state exactly, and an audit trigger (an append-only log of every
row change the sink makes) must hold exactly one entry per source record: nothing lost, nothing applied twice."""

from __future__ import annotations

import random
import uuid

import pytest

from streamling.core.faults import POINTS
from tests.e2e.cli import run_cli, sqlite_state, write

SEED = 20261122
RECORDS = 200_000
KEYS = 20_000
PARTITIONS = 4
BATCH = 5_000  # → 40 epochs
CRASHES = 10
SCHEMA = {
    "type": "record",
    "name": "Account",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "version", "type": "long"},
    ],
}
PIPELINE = """
    sources:
      changes: {{type: kafka, topic: {topic}, ending_offsets: latest, primary_key: id}}
    transforms:
      shaped:
        type: sql
        primary_key: id
        sql: SELECT id, upper(name) AS name, amount * 2 AS doubled, version FROM changes
    sinks:
      accounts: {{type: postgres, from: shaped, schema: {schema}, table: accounts, deduplicate: false}}
    """


def changes(rng: random.Random) -> tuple[list[dict], list[bytes], dict[int, tuple]]:
    """Keyed inserts, updates and deletes (a deleted key may come back), and the final state they leave."""
    records, ops, live = [], [], {}
    for version in range(RECORDS):
        key = rng.randrange(KEYS)
        if key not in live:
            op = b"c"
        else:
            op = b"d" if rng.random() < 0.2 else b"u"
        record = {
            "id": key,
            "name": f"n{key}-{version % 97}",
            "amount": round(rng.uniform(0, 1e4), 2),
            "version": version,
        }
        records.append(record)
        ops.append(op)
        if op == b"d":
            live.pop(key)
        else:
            live[key] = (record["name"].upper(), record["amount"] * 2, version)
    return records, ops, live


@pytest.fixture
def audited(pg_connect):
    name = f"f_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(
            f'CREATE TABLE "{name}".accounts (id bigint PRIMARY KEY, name text, doubled double precision, '
            "version bigint)"
        )
        conn.execute(f'CREATE TABLE "{name}".audit (id bigint, op text, version bigint)')
        conn.execute(
            f'CREATE FUNCTION "{name}".audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
            f"IF TG_OP = 'DELETE' THEN INSERT INTO \"{name}\".audit VALUES (OLD.id, TG_OP, OLD.version); "
            f'ELSE INSERT INTO "{name}".audit VALUES (NEW.id, TG_OP, NEW.version); END IF; RETURN NULL; END $$'
        )
        conn.execute(
            f'CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON "{name}".accounts '
            f'FOR EACH ROW EXECUTE FUNCTION "{name}".audit()'
        )
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_ten_sigkills_at_random_points_lose_nothing_and_apply_nothing_twice(
    tmp_path, kafka, postgres_env, pg_connect, audited
) -> None:
    rng = random.Random(SEED)
    records, ops, expected = changes(rng)
    topic = kafka.topic("faults", partitions=PARTITIONS)
    kafka.produce_avro(topic, SCHEMA, records, ops=ops, partition_of=lambda i: records[i]["id"] % PARTITIONS)
    path = write(tmp_path, PIPELINE.format(topic=topic, schema=audited))
    env = {**kafka.env, **postgres_env, "STREAMLING__JOB_MODE": "true", "STREAMLING__RECORD_BATCH_SIZE": str(BATCH)}
    crashes = sorted(zip(rng.sample(range(2, 31), CRASHES), rng.choices(POINTS, k=CRASHES), strict=True))
    for epoch, point in crashes:
        crashed = run_cli(tmp_path, str(path), env={**env, "STREAMLING_CRASH_AT": f"{point}:{epoch}"}, timeout=300)
        assert crashed.returncode == -9, f"{point}:{epoch} was not reached\n{crashed.stderr[-3000:]}"
    finished = run_cli(tmp_path, str(path), env=env, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]

    with pg_connect() as conn:
        table = {
            row[0]: row[1:]
            for row in conn.execute(f'SELECT id, name, doubled, version FROM "{audited}".accounts').fetchall()
        }
        audit = conn.execute(
            f"SELECT count(*), count(DISTINCT version) FILTER (WHERE op <> 'DELETE') FROM \"{audited}\".audit"
        ).fetchone()
        kinds = dict(conn.execute(f'SELECT op, count(*) FROM "{audited}".audit GROUP BY op').fetchall())
    assert table == expected
    deletes = ops.count(b"d")  # a DELETE logs the version it removed, so only writes carry new versions
    assert audit == (RECORDS, RECORDS - deletes)  # one change per source record, none repeated
    assert kinds["DELETE"] == deletes
    assert kinds["INSERT"] == ops.count(b"c")
    state = sqlite_state(tmp_path / "state.db")
    assert sum(v["offset"] for k, v in state.items() if k.startswith(f"changes:{topic}:")) == RECORDS
