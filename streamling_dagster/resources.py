"""Resources: the engine's settings, and the run's SparkSession, started through the engine's public API.

The Spark resource has dagster-pyspark's shape (`spark_config`, `spark_session`, `spark_context`) without its
class, whose module imports pyspark: a code location builds its resources at load, and loads no Spark for that.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg
from dagster_spark.utils import flatten_dict
from pydantic import PrivateAttr

import streamling
from streamling.config import Settings, load_settings
from streamling_dagster.pipelines import PipelineFile

SECRET_CONF = re.compile(r"(?i)secret|password|token|access[.]?key|credential")
"""Spark configuration keys that hold secrets: Spark's own `spark.redaction.regex`, and credentials."""


EMBEDDED_WAIT_SEC = 600.0

Backfill = Callable[[dg.AssetExecutionContext, "StreamlingResource", "StreamlingSparkResource", Any], Iterator[Any]]
BACKFILLS: dict[str, Backfill] = {}
"""Each pipeline's backfill work by its op's name, registered where the backfill's multi-asset is defined
(`backfill.backfill_asset_args`): how `StreamlingResource.backfill` finds it from a context, without this module
importing the backfill machinery, whose ops name these resources in their signatures."""


class StreamlingResource(dg.ConfigurableResource):
    """Engine settings with the CLI's layering — embedded defaults < `config_file` < ``STREAMLING__…`` environment
    — plus `overrides` (dotted keys) set in Dagster. Connection secrets stay in the environment."""

    config_file: str | None = None
    overrides: dict[str, str] = {}
    engine_url: str | None = None
    """A warm engine (`streamling serve`) that the stream and backfill ops run their pipelines on; unset (or not
    answering when an op starts): each run starts its own Spark session. ``STREAMLING__ENGINE_URL`` also sets it."""

    def settings(self, **extra: Any) -> Settings:
        """The settings; a run waits `EMBEDDED_WAIT_SEC` for the embedded ClickHouse data path while another run's
        process holds it (e.g. a backfill-then-stream in its backfill), unless `embedded_wait_sec` is set."""
        engine = {"engine_url": self.engine_url} if self.engine_url else {}
        settings = load_settings(self.config_file, os.environ, {**engine, **self.overrides, **extra})
        for name in ("clickhouse_source", "clickhouse_sink"):
            section = getattr(settings, name)
            if "embedded_wait_sec" not in section.model_fields_set:
                waits = section.model_copy(update={"embedded_wait_sec": EMBEDDED_WAIT_SEC})
                settings = settings.model_copy(update={name: waits})
        return settings

    def pipeline_settings(self, pf: PipelineFile, **extra: Any) -> Settings:
        """Settings for one pipeline: its own state-backend namespace (see `Orchestration.application_id`)."""
        base = self.settings(**extra)
        namespace = pf.orchestration.application_id or f"{base.application_id}.{pf.name}"
        return base.model_copy(update={"application_id": namespace})

    def backfill(self, context: dg.AssetExecutionContext, spark: StreamlingSparkResource, config: Any = None) -> Any:
        """Inside a `@streamling_assets` function: run its pipeline's backfill, yielding the materializations and
        checks (``yield from streamling.backfill(context, spark)``)."""
        name = context.op_def.name
        if name not in BACKFILLS:
            raise dg.DagsterInvariantViolationError(
                f"Error: op '{name}': StreamlingResource.backfill runs inside a @streamling_assets function only"
            )
        return BACKFILLS[name](context, self, spark, config)


class StreamlingSparkResource(dg.ConfigurableResource):
    """A Spark session configured like the engine's own, started on first use and stopped when the run
    ends. Like the CLI's, it ships the plugins loaded from ``STREAMLING__PLUGIN__PATH`` (the code location loaded
    them when it read the pipeline files) to Spark's Python workers; each run's plan ships any it loads later.

    Built by `from_settings` (the code location's default), it follows each run's engine settings: the pipeline ops
    start it from the `StreamlingResource`'s `spark.*` (its config file, overrides and ``STREAMLING__SPARK__…``),
    so a cluster master and `spark.environment_archive` set there reach the session; `spark_config` then shows
    the settings the code location loaded. Built with a `spark_config` of one's own, that config is the session's."""

    spark_config: dict[str, Any]
    """Spark configuration, flat (``spark.executor.memory``) or nested as dagster-pyspark takes it."""
    follow_engine_settings: bool = False
    """Start the session from the run's engine settings (`session_for`) rather than from `spark_config`."""
    _spark_session: Any = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamlingSparkResource:
        """Secret-looking keys of `spark.conf` (an S3 secret key, say) stay out of the resource's config, which
        the Dagster UI shows; the run adds them from the settings when it builds the session."""
        conf = streamling.spark_conf(settings.spark, resolve_archive=False)  # runs resolve it (`session_for`)
        return cls(
            spark_config={k: v for k, v in conf.items() if not SECRET_CONF.search(k)}, follow_engine_settings=True
        )

    def session_for(self, settings: Settings) -> Any:
        """The run's session, started from `settings.spark` when this resource follows the engine's settings."""
        if self._spark_session is None and self.follow_engine_settings:
            self._start(streamling.spark_conf(settings.spark))
        return self.spark_session

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Nothing yet: the session starts on first use, so a run refused at the start of its op (another run
        holds the pipeline) never starts Spark."""

    @property
    def spark_session(self) -> Any:
        """Started on first use: from the environment's engine settings when this resource follows them (code of
        one's own that asks for the session directly), else from `spark_config`."""
        if self._spark_session is None:
            following = self.follow_engine_settings
            self._start(streamling.spark_conf(load_settings(environ=os.environ).spark) if following else None)
        return self._spark_session

    @property
    def spark_context(self) -> Any:
        return self.spark_session.sparkContext

    def _start(self, run_conf: dict[str, str] | None = None) -> None:
        """From `run_conf` (`session_for`: the run's whole configuration, secrets included), else from
        `spark_config` plus the secret keys of the environment's settings."""
        engine = load_settings(environ=os.environ).spark
        if run_conf is None:
            secrets = {k: v for k, v in engine.conf.items() if SECRET_CONF.search(k) and k not in self.spark_config}
            conf = {**self.spark_config, **secrets}
        else:
            conf = run_conf
        # its JVM out of the run's process group; values as dagster-pyspark passed them (the builder's `True` is "true")
        self._spark_session = streamling.start_spark_session(dict(flatten_dict(conf)))

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._spark_session is not None:
            self._spark_session.stop()


def default_resources(settings: Settings) -> dict[str, Any]:
    """What a code location binds when the user binds nothing: the engine's settings and a Spark session that
    follows them."""
    return {"streamling": StreamlingResource(), "spark": StreamlingSparkResource.from_settings(settings)}
