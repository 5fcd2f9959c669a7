"""The documentation keeps working: every relative link (and its ``#anchor``) resolves, every path the pages name
exists, every command shown in a ``bash``/``sh`` block is one the project has (a ``streamling …`` command parses with
the CLI's own argument parser, a ``STREAMLING__…`` variable is a setting), every pipeline example passes the
engine's structural validation (what ``streamling --validate`` checks before Spark), every settings example loads,
and docs/settings.md is what the settings model renders.

docs/writing-a-plugin.md's code blocks are tied to the example plugin's files by tests/unit/test_plugin_guide.py;
here it gets the link and command checks only."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streamling.config import Settings, load_settings
from streamling.config import reference as settings_reference
from streamling.errors import StreamlingError

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
"""The pages whose links, commands, examples and named paths are checked."""
BENCH = REPO / "bench" / "README.md"
NAMING = [*DOCS, BENCH]
"""The pages whose named paths are checked."""
LINKED = [*DOCS, REPO / "ARCHITECTURE.md", BENCH]
"""The pages whose links are checked."""
GUIDE = REPO / "docs" / "writing-a-plugin.md"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
NAMED = re.compile(
    r"(?<![\w./-])((?:pipelines|plugins|bench|tests|docs|engine|infra|streamling_dagster)(?:/[\w-][\w.-]*)*\w)/?(?![\w<*{/-])"
)
"""Repository paths a page names (a folder's trailing ``/`` left out of the match); a template
(``bench/results/suite-<UTC time>.json``) or a hidden folder made at run time (``bench/.venv-quix``) is not one."""
SECTIONS = ("sources", "transforms", "sinks")


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def _prose(text: str) -> str:
    """The page without its fenced blocks and inline code, where link-like text is not a link."""
    text = FENCE.sub("", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (``_`` and ``-`` kept), spaces as ``-``."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


@pytest.mark.parametrize("page", LINKED, ids=_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for match in LINK.finditer(_prose(page.read_text())):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http(s), mailto: not this test's business
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no such file {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading '#{anchor}' in {_id(path)}")
    assert not broken, f"{_id(page)} has broken links:\n" + "\n".join(broken)


def test_the_named_paths_are_found() -> None:
    """Files and folders, with or without a trailing ``/``, at a sentence's end or in code; templates, globs and
    hidden folders are not paths."""
    text = (
        "See plugins/nowhere_plugin/ and `pipelines/nowhere.yaml`. Also bench/nowhere.py, (docs/nowhere/), "
        "bench/results/suite-<UTC time>.json, bench/*.py, plugins/{name}/x and bench/.venv-quix."
    )
    assert NAMED.findall(text) == [
        "plugins/nowhere_plugin",
        "pipelines/nowhere.yaml",
        "bench/nowhere.py",
        "docs/nowhere",
    ]
    # The plugin guide names both examples' folders as ``[`plugins/basic_plugin/`](…)``, with the slash.
    named = {match.group(0) for match in NAMED.finditer(GUIDE.read_text())}
    assert {"plugins/basic_plugin/", "plugins/acme_api/"} <= named


@pytest.mark.parametrize("page", NAMING, ids=_id)
def test_every_path_the_page_names_exists(page: Path) -> None:
    named = set(NAMED.findall(page.read_text()))
    # A recording may be named without its suffix (``bench/results/suite-<time>``: its .json and .md).
    missing = sorted(p for p in named if not (REPO / p).exists() and not list(REPO.glob(f"{p}.*")))
    assert not missing, f"{_id(page)} names paths that do not exist: {missing}"


def test_the_pages_are_linked_from_the_readme_and_the_index() -> None:
    readme, index = (REPO / "README.md").read_text(), (REPO / "docs" / "README.md").read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"


def test_the_readme_stays_a_landing_page() -> None:
    readme = REPO / "README.md"
    assert len(readme.read_text().splitlines()) <= 300, "README.md is the landing page; the reference belongs in docs/"
    shown = [[words[:2] for words in commands(body)] for _, body in blocks(readme, "bash")]
    assert any(["./dev", "run"] in block and ["./dev", "test"] in block for block in shown), (
        "README.md shows `./dev run` and `./dev test` together in one ```bash block"
    )


# ------------------------------------------------------------------------------------------------- settings page


def test_the_settings_reference_is_the_model() -> None:
    assert settings_reference.DOC.read_text() == settings_reference.markdown(), (
        f"docs/settings.md differs from the settings model: run `{settings_reference.REGENERATE}`"
    )


def test_the_settings_reference_ignores_a_config_file_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page shows the embedded defaults wherever it is generated from: a config.yaml that `load_settings` would
    find in the current directory changes nothing, and its password never reaches the page."""
    monkeypatch.chdir(REPO)
    expected = settings_reference.markdown()
    (tmp_path / "config.yaml").write_text(
        "record_batch_size: 7\npostgres_sink: {pass: hunter2}\nstate_backend: {postgres: {password: hunter3}}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert load_settings(None, environ={}).record_batch_size == 7  # the file is one load_settings reads
    page = settings_reference.markdown()
    assert page == expected
    assert "hunter2" not in page and "hunter3" not in page


def test_every_setting_is_described() -> None:
    undescribed = [
        line.split("|")[1].strip()
        for line in settings_reference.markdown().splitlines()
        if line.startswith("| `") and line.rstrip().endswith("|  |")
    ]
    assert not undescribed, f"settings without a description (give the field a docstring): {undescribed}"


# ------------------------------------------------------------------------------------------------------ commands


def blocks(page: Path, *langs: str) -> Iterator[tuple[int, str]]:
    """(line number, body) of each fenced block of one of `langs`."""
    text = page.read_text()
    for match in FENCE.finditer(text):
        if match["lang"] in langs:
            yield text.count("\n", 0, match.start()) + 2, match["body"]


def commands(body: str) -> Iterator[list[str]]:
    """The simple commands of a shell block, as words: lines joined where a quote or a trailing ``\\`` continues
    them, comments dropped, split at ``&&``, ``||``, ``;``, ``|`` and ``&``."""
    pending = ""
    for line in body.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line + "\n"
        lexer = shlex.shlex(pending, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        pending = ""
        command: list[str] = []
        for word in [*words, ";"]:
            if word in ("&&", "||", ";", "|", "&", ";;"):
                if command:
                    yield command
                command = []
            else:
                command.append(word)
    assert not pending.strip(), f"an unfinished command: {pending}"


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


@pytest.fixture
def parse(monkeypatch: pytest.MonkeyPatch):
    """`parse(main, argv)`: the namespace `main`'s argument parser makes of `argv`, nothing run; a bad command line
    fails the test with argparse's own message."""
    original = argparse.ArgumentParser.parse_args

    def parsed_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed_then_stop)

    def run(main, argv: list[str]) -> argparse.Namespace:
        try:
            main(argv)
        except _Parsed as parsed:
            return parsed.namespace
        except SystemExit as exc:
            pytest.fail(f"{argv} does not parse (exit {exc.code})")
        pytest.fail(f"{argv}: the command ran without parsing arguments")

    return run


def _services_module():
    loader = importlib.machinery.SourceFileLoader("infra_services", str(REPO / "infra" / "services"))
    spec = importlib.util.spec_from_loader("infra_services", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _expand(value: str) -> str:
    return value.replace("$PWD", str(REPO))


def _exists(path: str) -> bool:
    """A path of the repository (``$PWD`` is its root), or the venv's, which `./dev setup` makes."""
    return (REPO / _expand(path)).exists() or path.startswith(".venv/")


class Checker:
    """One shell command of the docs, checked as far as it can be without running it."""

    def __init__(self, parse) -> None:
        self.parse = parse
        self.services = _services_module()

    def check(self, words: list[str]) -> None:
        env = {}
        while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        self.settings(env)
        if not words:
            return
        program, args = words[0], words[1:]
        handler = {
            "streamling": self.streamling,
            "./dev": self.dev,
            "infra/services": self.infra_services,
            "python": self.python,
            ".venv/bin/python": self.python,
            "eval": self.eval,
            "export": self.export,
            ".": self.source,
            "pip": self.pip,
            "docker": self.docker,
            "cp": self.copy,
        }.get(program)
        if handler is not None:
            handler(args)
        else:
            # Commands of other tools shown as they are used; their arguments are not this project's.
            assert program in ("dagster", "mkdir", "ls", "kill", "curl", "cd", "jstack"), (
                f"unknown command {program!r}: teach tests/unit/test_docs.py to check it, or show it as ```text"
            )

    def settings(self, env: dict[str, str]) -> None:
        ours = {k: _expand(v) for k, v in env.items() if k.startswith("STREAMLING__")}
        if ours:
            load_settings(None, environ=ours)  # an unknown key or a bad value raises, naming the variable

    def streamling(self, args: list[str]) -> None:
        from streamling.cli import main

        namespace = self.parse(main, args)
        pipeline = getattr(namespace, "pipeline", None)
        if pipeline is not None:
            assert _exists(pipeline), f"streamling {' '.join(args)}: no pipeline file {pipeline}"

    def dev(self, args: list[str]) -> None:
        command = args[0] if args else "run"
        assert command in ("setup", "run", "test"), f"./dev has no command {command!r}"
        if command == "run":
            self.streamling(args[1:] or ["pipelines/quickstart.yaml"])

    def infra_services(self, args: list[str]) -> None:
        known = re.findall(r"infra/services (\w+)", self.services.__doc__)
        assert args and args[0] in known, f"infra/services has no command {args[:1]}; it knows {known}"
        if args[0] in ("up", "down", "status", "env"):
            unknown = [name for name in args[1:] if name not in self.services.SERVICES]
            assert not unknown, f"infra/services knows no service {unknown}"

    def python(self, args: list[str]) -> None:
        if args[:1] == ["-c"]:
            return
        if args[:1] == ["-m"]:
            module = args[1]
            assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
            if module == "streamling_dagster.execute":
                from streamling_dagster.execute import main

                self.parse(main, args[2:])
            return
        assert args and _exists(args[0]), f"python {' '.join(args)}: no such script"

    def eval(self, args: list[str]) -> None:
        inner = re.fullmatch(r"\$\((.*)\)", args[0], re.DOTALL) if len(args) == 1 else None
        assert inner, f'eval {args}: only eval "$(command)" is shown'
        for words in commands(inner.group(1)):
            self.check(words)

    def export(self, args: list[str]) -> None:
        self.settings(dict(arg.partition("=")[::2] for arg in args))

    def source(self, args: list[str]) -> None:
        assert args == [".venv/bin/activate"], f". {args}: only the venv is sourced"

    def pip(self, args: list[str]) -> None:
        assert args[:1] == ["install"]
        for arg in args[1:]:
            if not arg.startswith("-"):
                assert _exists(arg), f"pip install {arg}: no such path"

    def docker(self, args: list[str]) -> None:
        if "-f" in args:
            dockerfile = args[args.index("-f") + 1]
            assert _exists(dockerfile), f"docker {' '.join(args)}: no {dockerfile}"

    def copy(self, args: list[str]) -> None:
        source = next(a for a in args if not a.startswith("-"))
        assert _exists(source), f"cp {source}: no such file"


SHELL = [(page, line, body) for page in DOCS for line, body in blocks(page, "bash", "sh", "shell")]


@pytest.mark.parametrize(("page", "line", "body"), SHELL, ids=[f"{_id(p)}:{n}" for p, n, _ in SHELL])
def test_every_shell_command_shown_works(page: Path, line: int, body: str, parse) -> None:
    checker = Checker(parse)
    for words in commands(body):
        checker.check(words)


def test_the_command_checks_catch_mistakes(parse) -> None:
    checker = Checker(parse)
    for wrong in (
        "streamling pipelines/quickstart.yaml --valdate",
        "streamling pipelines/nowhere.yaml --validate",
        "streamling serve --prot 1",
        "./dev run pipelines/quickstart.yaml --dry-run --validate",
        "infra/services up postgre",
        "STREAMLING__JOB_MOD=true ./dev run",
        "python -m streamling.nowhere",
        "streamling_run pipelines/quickstart.yaml",
        "python /nowhere/script.py",
        "python $HOME/script.py",
        "cp $PWD/nowhere.yaml config.yaml",
    ):
        with pytest.raises((AssertionError, pytest.fail.Exception, StreamlingError)):
            for words in commands(wrong):
                checker.check(words)


# ------------------------------------------------------------------------------------------------------ examples


def yaml_examples() -> list[tuple[Path, int, str]]:
    return [(page, line, body) for page in DOCS if page != GUIDE for line, body in blocks(page, "yaml", "yml")]


@pytest.mark.parametrize(
    ("page", "line", "body"), yaml_examples(), ids=[f"{_id(p)}:{n}" for p, n, _ in yaml_examples()]
)
def test_every_yaml_example_is_valid(page: Path, line: int, body: str, tmp_path: Path) -> None:
    from streamling.topology import pipeline as topology

    document = yaml.safe_load(body)
    assert isinstance(document, dict), f"{_id(page)}:{line}: not a YAML mapping"
    keys = set(document)
    if keys & set(SECTIONS):
        settings = load_settings(None, environ={})
        if {"sources", "sinks"} <= keys:
            # A whole pipeline: what `streamling --validate` checks before Spark analyses its SQL.
            pipeline, report = topology.load_pipeline(body, name="example", settings=settings)
            assert pipeline is not None, f"{_id(page)}:{line}: {report.errors}"
        else:
            # A fragment showing some nodes: each node as the validator builds it (its type, its fields).
            topology.REGISTRY.ensure_loaded()
            report = topology.ValidationReport()
            topology._build_nodes({s: document.get(s) or {} for s in SECTIONS}, report)
            assert not report.errors, f"{_id(page)}:{line}: {report.errors}"
        if "orchestration" in document:
            _orchestration(document["orchestration"])
    elif keys == {"orchestration"}:
        _orchestration(document["orchestration"])
    elif document.get("type") == "streamling_dagster.StreamlingPipelineComponent":
        module, _, name = document["type"].rpartition(".")
        component = getattr(importlib.import_module(module), name)
        fields = {f.name for f in dataclasses.fields(component)}
        assert set(document["attributes"]) <= fields, set(document["attributes"]) - fields
        assert (REPO / "pipelines" / document["attributes"]["pipeline"]).is_file()
    else:
        assert keys <= set(Settings.model_fields), f"{_id(page)}:{line}: neither a pipeline nor settings: {keys}"
        # Settings examples load as a config file would (values that name files need not exist).
        path = tmp_path / "config.yaml"
        path.write_text(body)
        load_settings(str(path), environ={})


def _orchestration(block: object) -> None:
    from streamling_dagster.pipelines import Orchestration

    Orchestration.model_validate(block)
