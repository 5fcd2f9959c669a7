"""What every row carries and how its values are written as JSON: neutral (no Spark, no Arrow), so a worker that
only decodes or writes rows (the Kafka reader, the Postgres writer) loads neither for them."""

from __future__ import annotations

import base64
from datetime import date, datetime, time
from decimal import Decimal

GS_OP = "_gs_op"
"""The upsert column every node carries: ``i`` insert, ``u`` update, ``d`` delete."""


def json_default(value: object) -> object:
    """JSON for values json.dumps does not know: ISO times, exact decimal strings, base64 bytes."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)
