"""docs/operations.md stays true to the code: its configuration reference lists exactly the broker
properties the loader reads (``BROKER_PROPERTIES``), the broker's command-line options of both
``sparklog broker`` and ``python -m sparklog.broker``, every topic config with its default
(``TopicConfig``), the client settings and only environment variables the code reads; and every
``sparklog ...`` (and ``python -m sparklog.broker ...``) command line in its code blocks is one the
real argument parser takes. No cluster: the commands are parsed, not run (the runnable blocks run in
tests/examples/test_readme_blocks.py)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from sparklog.broker.__main__ import build_parser as build_broker_parser
from sparklog.cli.main import build_parser
from sparklog.config import TopicConfig
from sparklog.security.broker_config import BROKER_PROPERTIES
from sparklog.security.client_config import KEYS as CLIENT_KEYS

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tests/examples/...)
GUIDE = ROOT / "docs" / "operations.md"
FENCE = re.compile(r"^[ \t]*```(?P<language>\S*)[ \t]*$")
ROW_NAME = re.compile(r"^\|\s*`(?P<name>[^`]+)`")
OPTION = re.compile(r"^`(?P<option>--[a-z][a-z-]*)")
# a `sparklog` command (or the console script's path, `.../bin/sparklog`) at the start of a line or
# after a shell separator: not `/var/lib/sparklog`, `sparklog-broker@.service` or `User=sparklog`
SPARKLOG = re.compile(r"(?:^|(?<=[\s;&|(]))(?:\S*/bin/)?sparklog(?=[ \t]+[a-z-])")
BROKER_MODULE = re.compile(r"(?:^|(?<=[\s;&|(]))python3? -m sparklog\.broker(?=[ \t])")
PLACEHOLDERS = {"%i": "1"}  # systemd's instance name: the broker id of sparklog-broker@<id>.service


def guide() -> str:
    return GUIDE.read_text()


def section(heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading."""
    lines = guide().splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end])


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the markdown tables in ``text`` whose first cell starts with a name in
    backquotes: that name -> the row's cells."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        found = ROW_NAME.match(line)
        if found is not None:
            assert found.group("name") not in rows, f"{found.group('name')} is listed twice"
            rows[found.group("name")] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def code_blocks() -> list[tuple[int, str, str]]:
    """(line of the opening fence, language, text) of every fenced block of the guide."""
    lines = guide().splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        found.append((i + 1, fence.group("language"), "\n".join(lines[i + 1 : end])))
        i = end + 1
    return found


# ------------------------------------------------------------------------------- the reference tables
def test_the_broker_properties_table_lists_exactly_what_the_loader_reads() -> None:
    listed = table_rows(section("### Broker properties file (`--config`)"))
    assert set(listed) == set(BROKER_PROPERTIES), (
        f"missing from the guide: {sorted(set(BROKER_PROPERTIES) - set(listed))}; "
        f"not read by BrokerSecurity.from_properties: {sorted(set(listed) - set(BROKER_PROPERTIES))}"
    )
    for name, cells in listed.items():
        assert len(cells) == 4 and all(cells), f"{name}: a row of setting, default, meaning and where it applies"


def test_the_topic_config_table_lists_every_config_with_its_default() -> None:
    listed = table_rows(section("### Topic configs"))
    names = TopicConfig.names()
    assert set(listed) == set(names), (
        f"missing from the guide: {sorted(set(names) - set(listed))}; "
        f"not topic configs: {sorted(set(listed) - set(names))}"
    )
    defaults = TopicConfig().to_dict()
    for name, cells in listed.items():
        assert len(cells) == 4 and all(cells), f"{name}: a row of config, default, meaning and where it applies"
        assert f"`{defaults[name]}`" in cells[1], f"{name}: the default is {defaults[name]}, the guide says {cells[1]}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def _broker_subcommand() -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["broker"]
    raise AssertionError("the sparklog parser has no sub-commands")


def test_the_broker_command_line_table_lists_every_option_of_both_commands() -> None:
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section("### Broker command line").splitlines()
        if line.startswith("| `--") or line.startswith("| (none)")
    ]
    columns = [set(), set()]
    for cells in rows:
        for column in (0, 1):
            found = OPTION.match(cells[column])
            if found is not None:
                columns[column].add(found.group("option"))
    assert columns[0] == _options(_broker_subcommand()), "sparklog broker's options"
    assert columns[1] == _options(build_broker_parser()), "python -m sparklog.broker's options"


def test_the_client_settings_are_the_ones_clients_take() -> None:
    text = section("### Client settings")
    for key in ("bootstrap.servers", *CLIENT_KEYS):
        assert f"`{key}`" in text, key


def test_the_environment_variables_are_ones_the_code_reads() -> None:
    listed = table_rows(section("### Environment"))
    assert listed
    source = "\n".join(path.read_text() for path in (ROOT / "src" / "sparklog").rglob("*.py"))
    for name in listed:
        assert f'"{name}"' in source, f"{name}: no module of sparklog names it"


# ------------------------------------------------------------------------------- the command lines
def command_lines() -> list[tuple[str, list[str]]]:
    """Every ``sparklog ...`` and ``python -m sparklog.broker ...`` command of the guide's shell
    and text blocks, as (where and which, its arguments), shell comments and line continuations
    taken into account, cut at the first shell operator, placeholders filled in."""
    found: list[tuple[str, list[str]]] = []
    for line_number, language, text in code_blocks():
        if language not in ("bash", "text"):
            continue
        joined = re.sub(r"\\\n", " ", text)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)  # a shell comment
            line = re.sub(r"^ExecStart=", "", line.strip())  # a systemd unit's command
            for name in PLACEHOLDERS:
                line = line.replace(name, PLACEHOLDERS[name])
            for pattern, kind in ((SPARKLOG, "sparklog"), (BROKER_MODULE, "python -m sparklog.broker")):
                for start in pattern.finditer(line):
                    found.append((f"docs/operations.md:{line_number} {kind}", _arguments(line[start.end() :])))
    return found


def _arguments(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    arguments = []
    for token in lexer:
        if token and all(c in "|&;<>()" for c in token):
            break
        arguments.append(token)
    return arguments


def test_the_guide_shows_the_commands_it_is_about() -> None:
    """The extraction below finds the commands (a regular expression that found none would let
    every command line pass)."""
    shown = {" ".join(arguments[:2]) for _, arguments in command_lines()}
    for expected in ("broker --id", "topics describe", "topics create", "partitions reassign", "log verify"):
        assert expected in shown, f"no `sparklog {expected}` found in the guide's code blocks: {sorted(shown)}"
    assert any(kind.endswith("python -m sparklog.broker") for kind, _ in command_lines())


@pytest.mark.parametrize("where, arguments", command_lines(), ids=lambda value: str(value)[:60])
def test_every_command_line_parses(where: str, arguments: list[str]) -> None:
    parser = build_broker_parser() if where.endswith("python -m sparklog.broker") else build_parser()
    complaint = io.StringIO()
    with contextlib.redirect_stderr(complaint):
        try:
            parser.parse_args(arguments)
        except SystemExit as exc:
            raise AssertionError(f"{where}: {shlex.join(arguments)}: {complaint.getvalue().strip()}") from exc
