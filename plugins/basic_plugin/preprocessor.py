"""cap_rows: a preprocessor that caps every random_source's ``max_rows`` (say, in a test environment)."""

from __future__ import annotations

from typing import Any

from pydantic import PositiveInt

from streamling.plugin import Options, Preprocessor

CAPPED_TYPE = "basic_plugin.random_source"


class CapRowsOptions(Options):
    limit: PositiveInt


class CapRows(Preprocessor[CapRowsOptions]):
    name = "cap_rows"
    options_model = CapRowsOptions

    def process(self, definition: dict[str, Any]) -> dict[str, Any]:
        for node in (definition.get("sources") or {}).values():
            if not isinstance(node, dict) or node.get("type") != CAPPED_TYPE:
                continue
            options = node.get("options")
            if not isinstance(options, dict):
                options = node["options"] = {}
            try:
                wanted = int(options.get("max_rows", self.options.limit))
            except (TypeError, ValueError):
                continue  # left as is: validation names the bad value
            options["max_rows"] = str(min(wanted, self.options.limit))
        return definition
