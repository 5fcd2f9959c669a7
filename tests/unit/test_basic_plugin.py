"""The example plugin's classes on their own, without Spark: what each promises in its docstring.

The package is imported from plugins/basic_plugin under a private name, so the loader's own import of
`basic_plugin` (by path, in other tests of the session) never meets a module of that name already loaded.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
from pydantic import ValidationError

from streamling.plugin import Context, Epoch, Options, Plugin, State

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "basic_plugin"


def _import(name: str = "basic_plugin_under_test") -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


bp = _import()
from basic_plugin_under_test.functions import Redact  # noqa: E402
from basic_plugin_under_test.preprocessor import CapRows, CapRowsOptions  # noqa: E402
from basic_plugin_under_test.side_output import OpCounts  # noqa: E402
from basic_plugin_under_test.sink import JsonLinesOptions, JsonLinesSink  # noqa: E402
from basic_plugin_under_test.source import RandomSource, RandomSourceOptions, random_rows  # noqa: E402
from basic_plugin_under_test.transform import FilterOptions, FilterTransform  # noqa: E402


class DictState(State):
    """The plugin `State` interface over a dict (the runtime's stages values per epoch; here there is one)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def put(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))


def context(node: str = "n", state: State | None = None) -> Context:
    return Context(node, f"basic_plugin.{node}", state=state)


def test_the_plugin_declares_the_six_kinds_under_its_namespace() -> None:
    plugin = bp.PLUGIN
    assert isinstance(plugin, Plugin) and plugin.namespace == "basic_plugin"
    assert [plugin.id(name) for name, _ in plugin.node_classes()] == [
        "basic_plugin.random_source",
        "basic_plugin.filter_transform",
        "basic_plugin.jsonl_sink",
        "basic_plugin.op_counts",
    ]
    assert [f.name for f in plugin.functions] == ["redact"]
    assert [plugin.id(p.name) for p in plugin.preprocessors] == ["basic_plugin.cap_rows"]


def test_random_rows_are_fixed_by_seed_and_id_whatever_the_range() -> None:
    whole = random_rows(0, 0, 1000)
    assert whole.slice(0, 3).to_pylist() == [
        {"id": 0, "alphanumeric_field": "3fsnatkpgcyi7", "num_field": 542, "_gs_op": "u"},
        {"id": 1, "alphanumeric_field": "1oh862g535cl0", "num_field": 991, "_gs_op": "i"},
        {"id": 2, "alphanumeric_field": "03pd9t29z05zj", "num_field": 839, "_gs_op": "i"},
    ]
    assert pa.concat_tables(
        [pa.Table.from_batches([random_rows(0, lo, lo + 250)]) for lo in range(0, 1000, 250)]
    ).equals(pa.Table.from_batches([whole]))
    assert random_rows(1, 0, 1000).column("alphanumeric_field") != whole.column("alphanumeric_field")
    assert len(set(random_rows(3, 0, 200_000).column("alphanumeric_field").to_pylist())) == 200_000


def test_random_source_options_arrive_as_strings_like_the_originals_yaml() -> None:
    options = RandomSourceOptions.model_validate({"max_rows": "50", "record_batch_size": "20"})
    source = RandomSource(options, context())
    assert [source.latest_position(p) for p in (0, 20, 40)] == [20, 40, 50]
    assert [b.num_rows for b in source.read(40, 50)] == [10]
    assert source.finished(50) and not source.finished(40)
    assert source.backlog(None) == {"rows": 50} and source.backlog(20) == {"rows": 30}
    with pytest.raises(ValidationError, match="max_rows"):
        RandomSourceOptions.model_validate({"max_rows": "fifty"})


def test_filter_transform_keeps_one_operation_and_counts_a_missing_one_as_insert() -> None:
    options = FilterOptions.model_validate({"_gs_op": "i"})
    batch = pa.RecordBatch.from_pylist(
        [{"id": 1, "_gs_op": "i"}, {"id": 2, "_gs_op": "u"}, {"id": 3, "_gs_op": None}, {"id": 4, "_gs_op": "d"}]
    )
    transform = FilterTransform(options, context())
    assert transform.output_schema(batch.schema) == batch.schema
    assert transform.transform(batch).column("id").to_pylist() == [1, 3]
    deletes = FilterTransform(FilterOptions.model_validate({"_gs_op": "d"}), context())
    assert deletes.transform(batch).column("id").to_pylist() == [4]
    with pytest.raises(ValidationError, match="_gs_op"):
        FilterOptions.model_validate({"_gs_op": "x"})


def test_redact_keeps_the_last_four_characters_and_nulls() -> None:
    values = pa.array(["k3x9q2", "abcd", "ab", "", None, "äöüßxyz"])
    assert Redact()(values).to_pylist() == ["**x9q2", "abcd", "ab", "", None, "***ßxyz"]


def test_cap_rows_lowers_only_random_sources_above_the_limit() -> None:
    definition = {
        "sources": {
            "big": {"type": "basic_plugin.random_source", "options": {"max_rows": "10000"}},
            "small": {"type": "basic_plugin.random_source", "options": {"max_rows": "5"}},
            "default": {"type": "basic_plugin.random_source"},
            "bad": {"type": "basic_plugin.random_source", "options": {"max_rows": "many"}},
            "other": {"type": "generator", "rows": 10000},
        }
    }
    out = CapRows(CapRowsOptions(limit=20)).process(definition)["sources"]
    assert out["big"]["options"] == {"max_rows": "20"}
    assert out["small"]["options"] == {"max_rows": "5"}
    assert out["default"]["options"] == {"max_rows": "20"}
    assert out["bad"]["options"] == {"max_rows": "many"}  # validation names the bad value
    assert out["other"] == {"type": "generator", "rows": 10000}


def test_op_counts_accumulates_in_its_state() -> None:
    state = DictState()
    side = OpCounts(Options(), context("counts", state))
    epoch = Epoch("src", 1, {}, {})
    side.observe(pa.RecordBatch.from_pylist([{"_gs_op": "i"}, {"_gs_op": "u"}, {"_gs_op": None}]), epoch)
    side.observe(pa.RecordBatch.from_pylist([{"_gs_op": "d"}, {"_gs_op": "i"}]), epoch)
    assert state.values == {"counts": {"i": 3, "u": 1, "d": 1}}


def test_jsonl_sink_writes_an_epoch_at_flush_and_a_replay_replaces_it(tmp_path: Path) -> None:
    sink = JsonLinesSink(JsonLinesOptions(directory=str(tmp_path / "out")), context("files"))
    sink.open()
    epoch = Epoch("src", 7, {}, {})
    sink.write(pa.RecordBatch.from_pylist([{"id": 1, "_gs_op": "i"}]), epoch)
    sink.write(pa.RecordBatch.from_pylist([{"id": 2, "_gs_op": "u"}]), epoch)
    assert list((tmp_path / "out").iterdir()) == []  # nothing is visible before the flush
    sink.flush(epoch)
    path = tmp_path / "out" / "src-00000007.jsonl"
    assert path.read_text().splitlines() == ['{"id": 1, "_gs_op": "i"}', '{"id": 2, "_gs_op": "u"}']
    sink.write(pa.RecordBatch.from_pylist([{"id": 1, "_gs_op": "i"}, {"id": 3, "_gs_op": "i"}]), epoch)
    sink.flush(epoch)  # the same epoch replayed from the same committed position, with more rows
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["src-00000007.jsonl"]
    assert len(path.read_text().splitlines()) == 2
    assert sink.labels() == {"directory": str(tmp_path / "out")}
