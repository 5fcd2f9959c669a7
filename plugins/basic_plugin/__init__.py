"""Streamling's example plugin: one small, real class of each of the six kinds.

Loaded by path (``STREAMLING__PLUGIN__PATH=plugins/basic_plugin``) or, once installed
(``pip install plugins/basic_plugin``), through its ``streamling.plugins`` entry point.
"""

from streamling.plugin import Plugin

from .functions import Redact
from .preprocessor import CapRows
from .side_output import OpCounts
from .sink import JsonLinesSink
from .source import RandomSource
from .transform import FilterTransform

PLUGIN = Plugin(
    namespace="basic_plugin",
    operators={
        "random_source": RandomSource,
        "filter_transform": FilterTransform,
        "jsonl_sink": JsonLinesSink,
    },
    side_outputs={"op_counts": OpCounts},
    functions=[Redact],
    preprocessors=[CapRows],
)
