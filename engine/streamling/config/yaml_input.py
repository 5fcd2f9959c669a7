"""Reading a pipeline document: YAML (JSON included) with the limits a pipeline never needs to exceed.

PyYAML's safe loader accepts things that would crash or stall the validation after it: a document nested
thousands of levels deep (RecursionError), an alias that refers to a node containing it (a recursive
structure), aliases of aliases that expand to billions of values, dates like ``2020-02-30`` and integers of
thousands of digits (ValueError), and a key given twice in one mapping (silently, the last one wins, so a
node defined twice loses its first definition). `load` turns each into a `yaml.YAMLError` whose mark says
where, like any other YAML problem.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from streamling.core.messages import has_surrogate, shown

MAX_DEPTH = 64
"""Nesting levels, aliases expanded. A pipeline needs fewer than ten."""
MAX_VALUES = 1_000_000
"""Values in the document, aliases expanded (so a few nested aliases cannot expand to billions)."""
MERGE_TAG = "tag:yaml.org,2002:merge"


class PipelineLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # e.g. 2020-02-30, or an integer of 5000 digits
            reason = "too many digits" if str(exc).startswith("Exceeds the limit") else str(exc)
            problem = f"cannot read the value {shown(node.value)}: {reason}"
            raise ConstructorError(None, None, problem, node.start_mark) from None

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        value = super().construct_yaml_str(node)
        if has_surrogate(value):  # only an escape ("\ud800") can make one; nothing downstream could encode it
            problem = f"{shown(value)} holds a lone surrogate, which is not text"
            raise ConstructorError(None, None, problem, node.start_mark)
        return value  # type: ignore[no-any-return]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # unhashable: PyYAML reports it itself
                continue
            if first is not key_node:
                raise ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {shown(key)} is given twice (first at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


PipelineLoader.add_constructor("tag:yaml.org,2002:str", PipelineLoader.construct_yaml_str)


def _check_expansion(root: yaml.Node) -> None:
    """Reject recursive aliases, and documents whose aliases expand beyond MAX_DEPTH or MAX_VALUES."""
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (height, values)
    on_path: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in on_path:
            raise ComposerError(None, None, "an alias refers to a node that contains it", node.start_mark)
        if key not in measured:
            if depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", node.start_mark)
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            on_path.add(key)
            height, values = 0, 1
            for child in children:
                child_height, child_values = measure(child, depth + 1)
                height, values = max(height, child_height), values + child_values
                if values > MAX_VALUES:
                    raise ComposerError(
                        None, None, f"aliases expand the document to more than {MAX_VALUES} values", node.start_mark
                    )
            on_path.discard(key)
            measured[key] = (height + 1, values)
        height, values = measured[key]
        if depth + height - 1 > MAX_DEPTH:
            problem = f"aliases nest the document more than {MAX_DEPTH} levels deep"
            raise ComposerError(None, None, problem, node.start_mark)
        return height, values

    measure(root, 1)


def load(text: str) -> Any:
    """The document in `text`; raises `yaml.YAMLError` (with a mark where one is known)."""
    loader = PipelineLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
