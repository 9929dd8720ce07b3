"""docs/operations/cli.md keeps step with the parser: every command of ``jobsctl`` has a
section of its own on the page, every option of a command is named in that section, the
global options in theirs, and the page names no command that does not exist."""

import argparse
import re
from pathlib import Path

import pytest

from jobsctl.cli import build_parser

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("jobsctl's parser has no commands")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings a reader types: long forms (and short forms without a long one),
    leaving out --help and the global options every command repeats (suppressed there)."""
    found = set()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS or action.default == argparse.SUPPRESS:
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        found.update(longs or action.option_strings)
    return found


def _sections(text: str) -> dict[str, str]:
    """Heading line (with its #s) -> the text under it, up to the next heading of any level."""
    parts = re.split(r"^(#{1,6} .*)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _documented(sections: dict[str, str]) -> dict[str, str]:
    """Command name -> its section, from the third-level headings such as ### `add` or
    ### `pause`, `resume` (the page's title and its groups are the levels above)."""
    by_command: dict[str, str] = {}
    for heading, body in sections.items():
        if not heading.startswith("### "):
            continue
        for name in re.findall(r"`([a-z][a-z-]*)`", heading):
            by_command[name] = body
    return by_command


TEXT = PAGE.read_text()
SECTIONS = _sections(TEXT)
DOCUMENTED = _documented(SECTIONS)
COMMANDS = _commands()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_section(command):
    assert command in DOCUMENTED, f"docs/operations/cli.md has no section (### `{command}`) for jobsctl {command}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_is_in_its_section(command):
    body = DOCUMENTED.get(command, "")
    missing = sorted(o for o in _options(COMMANDS[command]) if not re.search(re.escape(o) + r"(?![\w-])", body))
    assert not missing, f"jobsctl {command}: {', '.join(missing)} not described in its section of {PAGE.name}"


def test_global_options_are_described():
    body = SECTIONS.get("## Global options", "")
    missing = sorted(o for o in _options(build_parser()) if not re.search(re.escape(o) + r"(?![\w-])", body))
    assert not missing, f"global options {', '.join(missing)} not described under 'Global options'"


def test_headings_name_only_commands():
    unknown = sorted(set(DOCUMENTED) - set(COMMANDS))
    assert not unknown, f"{PAGE.name} has sections for commands jobsctl does not have: {unknown}"


def _named_commands(text: str) -> set[str]:
    """The command of every `jobsctl ...` written on the page: the first word after
    jobsctl that is not a global option, its value, or a [bracketed] or UPPERCASE
    placeholder."""
    named = set()
    for match in re.finditer(r"\bjobsctl((?:[ \t]+[^\s`]+)+)", text):
        words = match.group(1).split()
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--store":
                i += 2
                continue
            if word.startswith(("-", "[")) or word.endswith("]"):
                i += 1
                continue
            if re.fullmatch(r"[a-z][a-z-]*", word):
                named.add(word)
            break
    return named


def test_page_names_no_command_that_does_not_exist():
    named = _named_commands(TEXT)
    assert named, "found no jobsctl command lines on the page"
    unknown = sorted(named - set(COMMANDS))
    assert not unknown, f"{PAGE.name} names commands jobsctl does not have: {unknown}"
