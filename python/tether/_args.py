"""The argument parser every `tether` command uses: `--help` shows each flag's default, and a
usage error is one line on stderr with exit code `USAGE`, never argparse's usage block.

`Parser` is `argparse.ArgumentParser` with `HelpFormatter` (the description and epilog keep
their line breaks; each option's help ends with `(default: ...)` unless it already names its
default, or with `(required)`). Every parser made is remembered in `PARSERS` (weakly), so a
test can walk every command and sub-command and check each flag.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
import traceback
import weakref
from typing import Any, NoReturn

from tether import _exit

#: Every `Parser` made in this process (a test walks them).
PARSERS: weakref.WeakSet[Parser] = weakref.WeakSet()


def _shown(default: Any) -> str:
    if default is None:
        return "none"
    if default is False:
        return "off"
    if default is True:
        return "on"
    if isinstance(default, list | tuple) and not default:
        return "none"
    if isinstance(default, list | tuple):
        return ",".join(str(d) for d in default)
    return str(default)


class HelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its default (or `(required)`), unless it names it. The
    description and epilog keep their line breaks; a line longer than the terminal wraps."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in re.split(r"\n\s*\n", text.strip("\n")):
            lines = para.splitlines()
            if any(line[:1].isspace() for line in lines[1:]) or para.startswith("Usage:"):
                paragraphs.append("\n".join(indent + line for line in lines))  # laid out
            else:
                joined = " ".join(line.strip() for line in lines)
                paragraphs.append(
                    textwrap.fill(
                        joined, max(width, 20), initial_indent=indent, subsequent_indent=indent
                    )
                )
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.help is argparse.SUPPRESS or isinstance(
            action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
        ):
            return action.help
        if "default" in text.lower() or "%(default)" in text:
            return text
        if not action.option_strings:
            if action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
                return f"{text} (default: {_shown(action.default)})".strip()
            return text
        if action.required:
            return f"{text} (required)".strip()
        shown = _shown(action.default).replace("%", "%%")
        return f"{text} (default: {shown})".strip()


def describes_default(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    """Whether `--help` of `parser` states `action`'s default (or that it is required)."""
    formatter = parser._get_formatter()
    text = formatter._get_help_string(action) or ""
    return "default" in text.lower() or "(required)" in text


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with Tether's help format and one-line usage errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        PARSERS.add(self)

    def error(self, message: str) -> NoReturn:
        """A usage error: one line on stderr, exit `USAGE`."""
        print(f"{self.prog}: usage: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(_exit.USAGE)


def debug() -> bool:
    """Whether tracebacks are wanted: `tether --debug ...` or `TETHER_DEBUG=1`."""
    return os.environ.get("TETHER_DEBUG") == "1"


def error_line(prog: str, exc: BaseException, suffix: str = "") -> None:
    """An expected error as one line on stderr, `PROG: code: message`; with `--debug` (or
    `TETHER_DEBUG=1`) its traceback first."""
    if debug():
        traceback.print_exception(exc)
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    print(f"{prog}: {text}{suffix}", file=sys.stderr)


__all__ = ["PARSERS", "HelpFormatter", "Parser", "debug", "describes_default", "error_line"]
