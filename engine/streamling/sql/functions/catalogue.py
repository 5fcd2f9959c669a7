"""Every catalogue function by its lower-case SQL name (aliases included), and the reference table of
docs/transforms.md.

``python -m streamling.sql.functions.catalogue`` prints the table (``--write`` writes it into docs/transforms.md
between its markers); a unit test keeps the page's copy equal."""

from __future__ import annotations

import sys
from pathlib import Path

from streamling.sql.functions import arrays, clock, decimals, hashes, json_functions, strings, wide_integers
from streamling.sql.functions.base import ArrowFunction, Doc, SparkFunction

FAMILIES = {
    "Wide integers": wide_integers,
    "Arbitrary-precision decimals": decimals,
    "Bytes and hashes": hashes,
    "Arrays and maps": arrays,
    "JSON": json_functions,
    "Strings": strings,
    "Time": clock,
}

SPARK: dict[str, SparkFunction] = {}
ARROW: dict[str, type[ArrowFunction]] = {}
ARROW_CLASSES: list[type[ArrowFunction]] = []

for _module in FAMILIES.values():
    for _function in _module.SPARK_FUNCTIONS:
        for _name in _function.names:
            SPARK[_name.lower()] = _function
    for _cls in _module.ARROW_FUNCTIONS:
        ARROW_CLASSES.append(_cls)
        for _name in (_cls.name, *_cls.aliases):
            ARROW[_name.lower()] = _cls

NAMES = frozenset(SPARK) | frozenset(ARROW)
_clash = set(SPARK) & set(ARROW)
if _clash:  # pragma: no cover - a programming error, caught by any test importing the catalogue
    raise RuntimeError(f"SQL functions defined twice: {sorted(_clash)}")


def lookup(name: str) -> SparkFunction | type[ArrowFunction] | None:
    key = name.lower()
    return SPARK.get(key) or ARROW.get(key)


def docs() -> list[Doc]:
    """Every function once (aliases listed with it), family by family, by name within a family."""
    out: list[Doc] = []
    for family, module in FAMILIES.items():
        rows = [f.doc() for f in module.SPARK_FUNCTIONS] + [c.doc() for c in module.ARROW_FUNCTIONS]
        out += sorted((_in_family(row, family) for row in rows), key=lambda d: d.name.lstrip("_"))
    return out


def _in_family(doc: Doc, family: str) -> Doc:
    return doc if doc.family == family else Doc(**{**doc.__dict__, "family": family})


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The reference table of docs/transforms.md."""
    lines = [
        "| Family | Function | Arguments | Result | NULL and bad input | Runs as |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for doc in docs():
        names = ", ".join(f"`{n}`" for n in (doc.name, *doc.aliases))
        cells = [doc.family, names, _cell(doc.arguments) or "(none)", _cell(doc.returns), _cell(doc.nulls), doc.engine]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- sql-functions:begin -->", "<!-- sql-functions:end -->"


DOC = Path(__file__).resolve().parents[4] / "docs" / "transforms.md"


def write_doc(path: Path = DOC) -> None:
    text = path.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(f"{text[:start]}\n{markdown()}{text[stop:]}")


if __name__ == "__main__":
    if "--write" in sys.argv:
        write_doc()
    else:
        print(markdown(), end="")
