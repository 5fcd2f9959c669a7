"""docs/writing-a-plugin.md cannot drift from the example plugins: each of its Python, YAML and TOML blocks is marked
with the file it comes from (``<!-- example: path -->`` right above the block) and must be found there verbatim.
That every path it names exists, its links resolve, its commands work and README.md links it is checked for every
page by tests/unit/test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "writing-a-plugin.md"
BLOCK = re.compile(r"(?:<!-- example: (?P<file>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.DOTALL)
CODE = {"python", "yaml", "toml"}


def blocks() -> list[re.Match[str]]:
    return list(BLOCK.finditer(GUIDE.read_text()))


def test_every_code_block_is_a_verbatim_region_of_the_file_it_names() -> None:
    checked = []
    for block in blocks():
        if block["lang"] in CODE:
            assert block["file"], f"a {block['lang']} block without its <!-- example: path --> marker:\n{block['body']}"
        if block["file"]:
            source = (REPO / block["file"]).read_text()
            assert block["body"] in source, f"this block is not (or no longer) in {block['file']}:\n{block['body']}"
            checked.append(block["file"])
    # The guide shows each kind from the example itself, and the pipelines that use them.
    for name in ("__init__", "transform", "source", "sink", "functions", "side_output", "preprocessor"):
        assert f"plugins/basic_plugin/{name}.py" in checked
    for path in (
        "engine/streamling/builtins/print_sink.py",  # the built-in written on the Arrow level ("Two tiers")
        "plugins/acme_api/source.py",
        "plugins/basic_plugin/pyproject.toml",
        "pipelines/plugin_random.yaml",
        "pipelines/plugin_redact.yaml",
        "pipelines/partner_orders.yaml",
    ):
        assert path in checked


def test_the_guide_names_both_tiers_and_the_built_in_written_on_the_arrow_level() -> None:
    """That the print sink is an `ArrowSink` is tests/unit/test_print_sink.py's."""
    text = GUIDE.read_text()
    assert "## 3. Two tiers: the Arrow level and the Spark level" in text
    assert "**The Arrow level — for most plugins.**" in text
    assert "**The Spark level — for what needs planning control.**" in text
