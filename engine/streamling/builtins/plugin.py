"""The built-in operators, as a plugin without a namespace: the entry point ``builtins`` of the group
``streamling.plugins`` (pyproject.toml), loaded like any installed plugin. Loading it also registers the built-in
dead-letter destinations (a topic, a table), which any built-in source or sink may name."""

from streamling.builtins.blackhole import BlackholeSink, MemorySink
from streamling.builtins.generator import GeneratorSource
from streamling.builtins.hybrid import HybridSource
from streamling.builtins.print_sink import OriginalPrintSink, PrintSink
from streamling.clickhouse.sink import ClickHouseSink
from streamling.clickhouse.source import ClickHouseSource
from streamling.files.source import FileSource
from streamling.http.handler import HandlerTransform
from streamling.http.webhook import WebhookSink
from streamling.kafka.dead_letters import TopicDeadLetters
from streamling.kafka.sink import KafkaSink
from streamling.kafka.source.operator import KafkaSource
from streamling.plugin import Plugin
from streamling.postgres.aggregate_sink import PostgresAggregateSink
from streamling.postgres.dead_letters import TableDeadLetters
from streamling.postgres.sink import PostgresSink
from streamling.script.transform import ScriptTransform
from streamling.sql.dynamic_tables.transform import DynamicTable
from streamling.sql.functions.catalogue import ARROW_CLASSES
from streamling.sql.transform import SqlTransform

PLUGIN = Plugin(
    namespace=None,
    operators={
        "generator": GeneratorSource,
        "kafka": [KafkaSource, KafkaSink],
        "clickhouse": [ClickHouseSource, ClickHouseSink],
        "hybrid": HybridSource,
        "file": FileSource,
        "sql": SqlTransform,
        "script": ScriptTransform,
        "handler": HandlerTransform,
        "dynamic_table": DynamicTable,
        "print": PrintSink,
        "print_sink": OriginalPrintSink,
        "blackhole": BlackholeSink,
        "memory": MemorySink,
        "postgres": PostgresSink,
        "postgres_aggregate": PostgresAggregateSink,
        "webhook": WebhookSink,
    },
    functions=ARROW_CLASSES,
)

DEAD_LETTER_DESTINATIONS = (TopicDeadLetters, TableDeadLetters)
"""Registered as their classes are defined (`DeadLetterTarget.kind`); named here so loading the plugin defines them."""
