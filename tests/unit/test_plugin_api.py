"""The public plugin module: light to import, and a class missing a required method fails when its plugin is
built, naming the class and the method."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamling.plugin import ArrowSink, ArrowSource, Options, Plugin, PluginError, SqlFunction


def test_importing_the_plugin_api_loads_no_spark_or_postgres_driver() -> None:
    code = (
        "import sys, streamling.plugin\n"
        "heavy = [m for m in ('pyspark', 'psycopg', 'streamling.runtime.executor', 'streamling.operators') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class _Half(ArrowSource[Options]):
    def output_schema(self):  # type: ignore[override]
        raise NotImplementedError

    def initial_position(self):  # type: ignore[override]
        return 0


def test_missing_required_methods_fail_at_load_naming_class_and_methods() -> None:
    with pytest.raises(PluginError) as caught:
        Plugin(namespace="acme", operators={"half": _Half})
    assert caught.value.message == (
        "plugin class tests.unit.test_plugin_api._Half does not implement the required methods latest_position, read"
    )


def test_a_sql_function_without_a_result_type_is_refused() -> None:
    class NoReturns(SqlFunction):
        name = "no_returns"

        def __call__(self, *args):  # type: ignore[no-untyped-def]
            return args[0]

    with pytest.raises(PluginError, match="needs a class attribute 'returns'"):
        Plugin(namespace="acme", functions=[NoReturns])


def test_namespace_and_names_are_identifiers() -> None:
    class Out(ArrowSink[Options]):
        def write(self, batch, epoch):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(PluginError, match="namespace 'ac-me' must match"):
        Plugin(namespace="ac-me", operators={"out": Out})
    with pytest.raises(PluginError, match=r"operator name 'o.ut' \(acme.o.ut\) must match"):
        Plugin(namespace="acme", operators={"o.ut": Out})
    assert Plugin(namespace="acme", operators={"out": Out}).id("out") == "acme.out"


def test_a_plugin_error_keeps_naming_its_own_node_through_outer_contexts() -> None:
    """A side output fails inside the evaluation its source's context wraps: the message names the plugin's node."""
    from streamling.errors import StreamlingError, error_context, wrap
    from streamling.plugins.worker import plugin_errors

    with pytest.raises(StreamlingError) as caught, error_context("generator source 'src'"):
        with plugin_errors("plugin 'acme.audit' (node 'audit')"):
            raise KeyError("tenant")
    assert caught.value.message == "plugin 'acme.audit' (node 'audit'): KeyError: 'tenant'"
    assert caught.value.user_facing
    # Raised inside a Spark task, it reaches the driver as text and is recovered the same way.
    spark_side = RuntimeError(
        f"Job aborted: ... streamling.errors.StreamlingNodeError: {caught.value.message}\n  at ..."
    )
    recovered = wrap(spark_side, "print sink 'out'")
    assert (recovered.message, recovered.user_facing) == (caught.value.message, True)
