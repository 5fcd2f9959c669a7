"""Warnings a Streamling user cannot act on, silenced for every process that loads the control plane.

Two Dagster APIs it relies on are marked beta, and Dagster warns about them on every code-location load and CLI
call (34 lines for the example pipelines): the observable stream-only sinks (`multi_observable_source_asset`), and
a step of `Definitions` that re-creates every sensor passing `owners` itself. Only these two messages are
filtered; any other warning still shows.
"""

import warnings

warnings.filterwarnings("ignore", message=r"Function `multi_observable_source_asset` is currently in beta")
warnings.filterwarnings("ignore", message=r"Parameter `owners` of initializer `SensorDefinition.__init__` is currently")
