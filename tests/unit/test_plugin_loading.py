"""Loading plugins by path and by entry point (real `importlib.metadata` discovery of a dist-info folder), and
the structural validation of plugin nodes: options, ids, preprocessors. No Spark."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from streamling.config import load_settings
from streamling.plugin import PluginError
from streamling.plugins import loader
from streamling.plugins.registry import OperatorRegistry
from streamling.topology.pipeline import load_pipeline
from tests.plugin_util import write_distribution, write_plugin, write_six_kinds


def unique(prefix: str = "acme") -> str:
    """Plugin modules stay imported for the whole session: a fresh name per test."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def settings(tmp_path: Path, **plugin: object):
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    return load_settings(config=str(config), environ={}, overrides={f"plugin.{k}": v for k, v in plugin.items()})


def load(text: str, config) -> tuple[object, list[str], list[str]]:
    pipeline, report = load_pipeline(textwrap.dedent(text), settings=config)
    return pipeline, report.errors, report.warnings


def test_a_plugin_file_runs_through_validation_with_options_from_either_place(tmp_path: Path) -> None:
    ns = unique()
    write_six_kinds(tmp_path / "plugins", ns)
    pipeline, errors, _ = load(
        f"""
        sources:
          src: {{type: {ns}.counter, options: {{rows: "12", step: 5}}}}
        transforms:
          keep: {{type: {ns}.keep, from: src, min_id: 3}}
          audit: {{type: {ns}.audit, from: keep, options: {{path: /tmp/x}}}}
        sinks:
          out: {{type: print, from: keep}}
        """,
        settings(tmp_path, path=str(tmp_path / "plugins" / f"{ns}.py")),
    )
    assert errors == []
    assert pipeline.nodes["src"].spec.options.rows == 12  # the original's string values are accepted
    assert pipeline.nodes["keep"].spec.options.min_id == 3  # a top-level field is an option
    assert pipeline.nodes["src"].spec.bounded
    assert pipeline.nodes["audit"].spec.side_output  # needs no consumer


def test_bad_options_are_reported_per_node_and_field_as_written(tmp_path: Path) -> None:
    ns = unique()
    write_six_kinds(tmp_path, ns)
    _, errors, _ = load(
        f"""
        sources:
          src: {{type: {ns}.counter, options: {{rows: many, colour: red}}}}
          two: {{type: {ns}.counter, step: x}}
        transforms:
          keep: {{type: {ns}.keep, from: src, min_id: 1, options: {{min_id: 2}}}}
        sinks:
          out: {{type: print, from: keep}}
          o2: {{type: print, from: two}}
        """,
        settings(tmp_path, path=str(tmp_path)),
    )
    assert errors == [
        f"source 'src' (type '{ns}.counter'): field 'options.rows': Input should be a valid integer, unable to parse "
        "string as an integer (got 'many')",
        f"source 'src' (type '{ns}.counter'): unknown field 'options.colour'",
        f"source 'two' (type '{ns}.counter'): missing required field 'options.rows'",
        f"source 'two' (type '{ns}.counter'): field 'step': Input should be a valid integer, unable to parse string "
        "as an integer (got 'x')",
        f"transform 'keep' (type '{ns}.keep'): option 'min_id' is given both at the top level and under 'options'",
    ]


def test_a_package_directory_and_a_directory_of_plugins(tmp_path: Path) -> None:
    a, b = unique("pkg"), unique("single")
    package = tmp_path / "many" / a
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .ops import PLUGIN\n")
    (package / "ops.py").write_text(
        textwrap.dedent(f"""
        from streamling.plugin import ArrowSink, Options, Plugin

        class Out(ArrowSink[Options]):
            def write(self, batch, epoch):
                pass

        PLUGIN = Plugin(namespace="{a}", operators={{"out": Out}})
        """)
    )
    write_six_kinds(tmp_path / "many", b)
    (tmp_path / "many" / "_helpers.py").write_text("X = 1\n")  # private modules are not plugins
    registry = OperatorRegistry()
    registry._loaded = True  # only what this test loads
    loader.load_path(registry, str(tmp_path / "many"))
    assert registry.types("sink") == [f"{a}.out", f"{b}.file"]
    assert registry.types("source") == [f"{b}.counter", f"{b}.pages"]
    assert registry.lookup("sink", f"{a}.out").origin == f"'{package / '__init__.py'}'"
    assert sorted(registry.functions()) == [f"{b}_shout"]
    assert registry.preprocessor_ids() == [f"{b}.rename"]


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    name = unique()
    path = write_plugin(tmp_path, name, "from streamling.plugin import Plugin\n\ndef broken(:\n    pass\n")
    _, errors, _ = load(
        "sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", settings(tmp_path, path=str(path))
    )
    assert errors == [f"plugin file {path}, line 3: syntax error: invalid syntax"]


def test_a_class_missing_a_method_fails_at_load_naming_class_and_method(tmp_path: Path) -> None:
    name = unique()
    path = write_plugin(
        tmp_path,
        name,
        f"""
        from streamling.plugin import ArrowTransform, Options, Plugin

        class Half(ArrowTransform[Options]):
            def output_schema(self, input_schema):
                return input_schema

        PLUGIN = Plugin(namespace="{name}", operators={{"half": Half}})
        """,
    )
    _, errors, _ = load(
        "sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", settings(tmp_path, path=str(path))
    )
    assert errors == [f"plugin '{path}': plugin class {name}.Half does not implement the required method transform"]


def test_an_import_error_names_the_plugin_line(tmp_path: Path) -> None:
    name = unique()
    path = write_plugin(tmp_path, name, "import os\nimport no_such_module_here\n")
    _, errors, _ = load(
        "sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", settings(tmp_path, path=str(path))
    )
    assert errors == [
        f"plugin '{path}' failed to load: ModuleNotFoundError: No module named 'no_such_module_here' ({path}, line 2)"
    ]


def test_entry_points_of_an_installed_distribution_are_loaded(tmp_path: Path, site: Path) -> None:
    ns = unique("dist")
    write_distribution(site, "acme-plugins", {"acme": f"{ns}:PLUGIN"}, {ns: ""})
    write_six_kinds(site, ns)
    registry = OperatorRegistry()
    loader.load_installed(registry)
    counter = registry.lookup("source", f"{ns}.counter")
    assert counter is not None
    assert counter.origin == f"entry point 'acme = {ns}:PLUGIN' of distribution 'acme-plugins'"
    assert registry.lookup("sink", "print") is not None  # the built-ins come the same way


def test_one_id_defined_twice_names_both_origins(tmp_path: Path, site: Path) -> None:
    ns = unique("twice")
    write_distribution(site, "acme-plugins", {"acme": f"{ns}_installed:PLUGIN"}, {})
    write_six_kinds(site, ns)
    (site / f"{ns}.py").rename(site / f"{ns}_installed.py")
    copy = write_six_kinds(tmp_path / "local", ns)
    registry = OperatorRegistry()
    loader.load_installed(registry)
    with pytest.raises(PluginError) as caught:
        loader.load_path(registry, str(copy))
    assert caught.value.message == (
        f"source type '{ns}.counter' is defined twice: by entry point 'acme = {ns}_installed:PLUGIN' of "
        f"distribution 'acme-plugins' and by '{copy}'"
    )


def test_a_broken_entry_point_is_reported_with_its_distribution(site: Path) -> None:
    write_distribution(site, "broken-plugins", {"broken": "no_such_module_xyz:PLUGIN"}, {})
    with pytest.raises(PluginError) as caught:
        loader.load_installed(OperatorRegistry())
    assert caught.value.message == (
        "plugin entry point 'broken = no_such_module_xyz:PLUGIN' of distribution 'broken-plugins' failed to load: "
        "ModuleNotFoundError: No module named 'no_such_module_xyz'"
    )


def test_a_preprocessor_rewrites_the_definition_before_parsing(tmp_path: Path) -> None:
    ns = unique()
    write_six_kinds(tmp_path, ns)
    config = settings(
        tmp_path,
        path=str(tmp_path / f"{ns}.py"),
        preprocessor_ids=f"{ns}.rename",
        preprocessor_options={f"{ns}.rename": {"prefix": "x_"}},
    )
    pipeline, errors, _ = load("sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", config)
    assert errors == []
    assert list(pipeline.nodes) == ["a", "x_b"]
    bad = settings(tmp_path, path=str(tmp_path / f"{ns}.py"), preprocessor_ids=f"{ns}.nope")
    _, errors, _ = load("sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", bad)
    assert len(errors) == 1
    assert errors[0].startswith(f"setting plugin.preprocessor_ids: no preprocessor '{ns}.nope' is loaded (loaded: ")
    assert f"{ns}.rename" in errors[0]  # (every loaded one: this process loaded other tests' plugins too)


def test_a_failing_preprocessor_is_named(tmp_path: Path) -> None:
    ns = unique()
    path = write_plugin(
        tmp_path,
        ns,
        f"""
        from streamling.plugin import Plugin, Preprocessor

        class Boom(Preprocessor):
            name = "boom"

            def process(self, definition):
                raise KeyError("tenant")

        PLUGIN = Plugin(namespace="{ns}", preprocessors=[Boom])
        """,
    )
    config = settings(tmp_path, path=str(path), preprocessor_ids=[f"{ns}.boom"])
    _, errors, _ = load("sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}", config)
    assert errors == [f"preprocessor '{ns}.boom': KeyError: 'tenant'"]


def test_unknown_plugin_setting_is_gone(tmp_path: Path) -> None:
    config = load_settings(
        config=str(tmp_path / "none.yaml"), environ={"STREAMLING__PLUGIN__PATH": str(tmp_path / "p.py")}
    )
    assert config.plugin.path == str(tmp_path / "p.py")


def test_an_arrow_level_node_s_warnings_name_it_and_its_driver_context_has_the_run_s_settings(tmp_path: Path) -> None:
    """What the built-in print sink uses on the Arrow level is there for every plugin: `warnings()`, reported with
    the node's name in front, and the run's settings on the driver."""
    from streamling.runtime.plan import Plan

    name = unique()
    path = write_plugin(
        tmp_path,
        name,
        f"""
        from streamling.plugin import ArrowSink, Options, Plugin

        class Opts(Options):
            legacy: int | None = None

        class Out(ArrowSink[Opts]):
            options_model = Opts

            def warnings(self):
                width = self.context.settings.record_batch_size
                return [f"legacy = {{self.options.legacy}} has no effect here (batches up to {{width}} rows)"]

            def write(self, batch, epoch):
                pass

        PLUGIN = Plugin(namespace="{name}", operators={{"out": Out}})
        """,
    )
    config = settings(tmp_path, path=str(path))
    pipeline, errors, _ = load(
        f"sources: {{a: {{type: generator}}}}\nsinks: {{b: {{type: {name}.out, from: a, legacy: 1}}}}", config
    )
    assert errors == []
    assert Plan(pipeline, config).warnings[-1] == (
        f"plugin '{name}.out' (node 'b'): legacy = 1 has no effect here (batches up to {config.record_batch_size} rows)"
    )


def test_every_built_in_type_is_registered_through_the_entry_point_group() -> None:
    from importlib.metadata import entry_points

    from streamling.builtins.plugin import PLUGIN

    (builtins,) = [ep for ep in entry_points(group="streamling.plugins") if ep.name == "builtins"]
    assert builtins.load() is PLUGIN
    assert sorted(PLUGIN.operators) == [
        "blackhole",
        "clickhouse",
        "dynamic_table",
        "file",
        "generator",
        "handler",
        "hybrid",
        "kafka",
        "memory",
        "postgres",
        "postgres_aggregate",
        "print",
        "print_sink",
        "script",
        "sql",
        "webhook",
    ]
