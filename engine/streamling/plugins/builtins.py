"""Importing this module registers every built-in operator type."""

from streamling.sinks import blackhole, print_sink  # noqa: F401
from streamling.sources import generator, kafka  # noqa: F401
from streamling.transforms import sql  # noqa: F401
