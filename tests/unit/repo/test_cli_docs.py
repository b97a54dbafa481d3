"""docs/cli.md says what ``python -m backend --help`` says: a usage line for every command the parser has, every one of
the command's long flags on its usage lines, and no command or flag the parser does not have."""

from __future__ import annotations

import argparse
import re

from backend.cli import build_parser
from tests.helpers import ROOT

CLI_DOC = ROOT / "docs" / "cli.md"
USAGE = re.compile(r"^\s*python -m backend ([a-z][a-z-]*)(.*)$", re.M)  # a usage line: the command, then the rest
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
COMMENT = re.compile(r"\s#\s.*$")  # what a usage line says after its command, which names no flag of its own


def parsed_commands(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Every subcommand of the parser -> its long flags (``--help`` aside), as its ``--help`` lists them."""
    (sub,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return {
        name: {flag for action in command._actions for flag in action.option_strings if flag.startswith("--")}
        - {"--help"}
        for name, command in sub.choices.items()
    }


def documented_commands(text: str) -> dict[str, set[str]]:
    """Every command with a usage line in ``text`` -> the long flags on its usage lines (their comments aside)."""
    found: dict[str, set[str]] = {}
    for name, rest in USAGE.findall(text):
        found.setdefault(name, set()).update(FLAG.findall(COMMENT.sub("", rest)))
    return found


def gaps(parsed: dict[str, set[str]], documented: dict[str, set[str]]) -> list[str]:
    """What the docs leave out of the parser, and what they name that the parser does not have, one line each."""
    found = []
    for name in sorted(parsed.keys() | documented.keys()):
        if name not in documented:
            found.append(f"{name}: no usage line in docs/cli.md")
        elif name not in parsed:
            found.append(f"{name}: in docs/cli.md, but the parser has no such command")
        else:
            found += [
                f"{name} {flag}: not on its usage lines in docs/cli.md"
                for flag in sorted(parsed[name] - documented[name])
            ]
            found += [
                f"{name} {flag}: in docs/cli.md, but not a flag of it"
                for flag in sorted(documented[name] - parsed[name])
            ]
    return found


def test_the_cli_docs_name_every_command_and_flag_the_parser_has():
    parsed = parsed_commands(build_parser())
    assert {"submit", "list", "show", "cancel", "export", "sweep"} <= parsed.keys()
    assert gaps(parsed, documented_commands(CLI_DOC.read_text(encoding="utf-8"))) == []


def test_the_cli_docs_check_fails_on_a_flag_or_command_left_out_or_gone():
    parser = build_parser()
    (sub,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    sub.choices["list"].add_argument("--since", help="a flag added to the parser, not to the docs")
    text = CLI_DOC.read_text(encoding="utf-8")
    text = text.replace("python -m backend cancel JOB_ID", "python -m backend stop JOB_ID")  # a renamed command
    text += "\n    python -m backend show JOB_ID [--json] [--verbose]  # a --flag in a comment is prose\n"
    assert gaps(parsed_commands(parser), documented_commands(text)) == [
        "cancel: no usage line in docs/cli.md",
        "list --since: not on its usage lines in docs/cli.md",
        "show --verbose: in docs/cli.md, but not a flag of it",
        "stop: in docs/cli.md, but the parser has no such command",
    ]
