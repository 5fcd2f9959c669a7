"""Importing this module registers every built-in operator type."""

from streamling.builtins import blackhole, generator, hybrid, print_sink  # noqa: F401
from streamling.clickhouse import sink as clickhouse_sink  # noqa: F401
from streamling.clickhouse import source as clickhouse_source  # noqa: F401
from streamling.dynamic_tables import transform as dynamic_table  # noqa: F401
from streamling.http import handler, webhook  # noqa: F401
from streamling.kafka import sink as kafka_sink  # noqa: F401
from streamling.kafka.source import operator as kafka_source  # noqa: F401
from streamling.postgres import aggregate_sink, sink  # noqa: F401
from streamling.script import transform as script  # noqa: F401
from streamling.sql import transform as sql  # noqa: F401
