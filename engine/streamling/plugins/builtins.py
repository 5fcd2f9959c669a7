"""Importing this module registers every built-in operator type."""

from streamling.sinks import blackhole, postgres_aggregate, print_sink  # noqa: F401
from streamling.sinks import clickhouse as clickhouse_sink  # noqa: F401
from streamling.sinks import kafka as kafka_sink  # noqa: F401
from streamling.sinks import postgres as postgres_sink  # noqa: F401
from streamling.sinks import webhook as webhook_sink  # noqa: F401
from streamling.sources import clickhouse as clickhouse_source  # noqa: F401
from streamling.sources import generator  # noqa: F401
from streamling.sources import hybrid as hybrid_source  # noqa: F401
from streamling.sources import kafka as kafka_source  # noqa: F401
from streamling.transforms import dynamic_table, script, sql  # noqa: F401
from streamling.transforms import handler as http_handler  # noqa: F401
