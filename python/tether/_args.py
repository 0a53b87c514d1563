"""The argument parser every `tether` command uses: `--help` shows each flag's default, and a
usage error is one line on stderr with exit code `USAGE`, never argparse's usage block.

`Parser` is `argparse.ArgumentParser` with `HelpFormatter` (the description and epilog keep
their line breaks; each option's help ends with `(default: ...)` unless it already names its
default, or with `(required)`). Every parser made is remembered in `PARSERS` (weakly), so a
test can walk every command and sub-command and check each flag.

A refusal (`refuse`, `error_line`, a usage error) is always one line on stderr. When the
command line asked for JSON (`--json` among the arguments a `Parser` parsed), the same refusal
is also one JSON document on stdout, so a script reading stdout never gets nothing:

    {"status": "refused", "error": "UsageError", "code": "usage", "message": "...",
     "details": {...}}

`code` is the error's stable code (`usage` for a usage error, the errno's name for an OS
error); `message` is the one line without the code; `details` the error's facts (never a
secret: errors carry none).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import json
import logging
import math
import os
import re
import signal
import sys
import textwrap
import traceback
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from tether import _exit

#: Every `Parser` made in this process (a test walks them).
PARSERS: weakref.WeakSet[Parser] = weakref.WeakSet()
#: Whether the arguments being parsed (or last parsed) asked for JSON.
_json_wanted = False


def json_wanted() -> bool:
    """Whether this command line asked for JSON (`--json` among a `Parser`'s arguments)."""
    return _json_wanted


def want_json(on: bool = True) -> None:
    """Mark this command line as JSON (a command whose JSON is its default off a terminal)."""
    global _json_wanted
    _json_wanted = on


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
            return text if "(required)" in text else f"{text} (required)".strip()
        shown = _shown(action.default).replace("%", "%%")
        return f"{text} (default: {shown})".strip()


def describes_default(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    """Whether `--help` of `parser` states `action`'s default (or that it is required)."""
    formatter = parser._get_formatter()
    text = formatter._get_help_string(action) or ""
    return "default" in text.lower() or "(required)" in text


#: What an option looks like (a token with a space or other characters is a value to argparse).
_OPTION = re.compile(r"--[A-Za-z0-9][-A-Za-z0-9_]*")


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with Tether's help format and one-line usage errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        PARSERS.add(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        self._given = given
        if "--json" in given:
            want_json()
        return super().parse_known_args(given, namespace)

    def _misspelled(self) -> list[str]:
        """The options given that this parser does not know (neither an option of its own nor
        a unique abbreviation of one), each with the nearest known one when there is one."""
        known = [s for s in self._option_string_actions if s.startswith("--")]
        out = []
        for token in getattr(self, "_given", []):
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if not _OPTION.fullmatch(name) or name in self._option_string_actions:
                continue  # a value ("--force it now": argparse takes it as one) or known
            if sum(k.startswith(name) for k in known) == 1:
                continue  # an abbreviation argparse takes
            near = difflib.get_close_matches(name, known, n=1)
            out.append(f"{name} (did you mean {near[0]}?)" if near else name)
        return out

    def usage_message(self, message: str) -> str:
        """argparse's ``message`` as a usage error says it: a missing required argument is
        named after any option it does not know (a misspelled one is why the right one looks
        missing), then where help is."""
        if message.startswith("the following arguments are required") and (
            wrong := self._misspelled()
        ):
            message = f"unrecognized arguments: {', '.join(wrong)}; {message}"
        return f"{message} (see `{self.prog} --help`)"

    def error(self, message: str) -> NoReturn:
        """A usage error: one line on stderr (and its JSON document), exit `USAGE`
        (`usage_message`)."""
        refuse(self.prog, "usage", self.usage_message(message), error="UsageError")
        raise SystemExit(_exit.USAGE)


def debug() -> bool:
    """Whether tracebacks are wanted: `tether --debug ...` or `TETHER_DEBUG=1`."""
    return os.environ.get("TETHER_DEBUG") == "1"


def refuse(
    prog: str,
    code: str,
    message: str,
    *,
    error: str = "Refused",
    details: dict[str, Any] | None = None,
    line: str | None = None,
) -> None:
    """A refusal: `PROG: code: message` (or `PROG: line`) on stderr and, when JSON was asked
    for, its document on stdout (see the module's docstring)."""
    print(f"{prog}: {line if line is not None else f'{code}: {message}'}", file=sys.stderr)
    sys.stderr.flush()
    if _json_wanted:
        doc = {
            "status": "refused",
            "error": error,
            "code": code,
            "message": message,
            "details": details or {},
        }
        print(json_text(doc), flush=True)


def duration(ms: object) -> str:
    """A span of milliseconds for a person: "8.2 s" under a minute, then "12 min 5 s",
    "3 h 12 min", "2 d 3 h" (an evidence age, a read-back's age); "-" for no number."""
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms):
        return "-"
    seconds = max(0.0, ms / 1000)
    if seconds < 60:
        return f"{math.floor(seconds * 10) / 10:.1f} s"  # 59.99 s is never "60.0 s"
    whole = int(seconds)
    for unit, size, smaller, small_size in (
        ("d", 86_400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            return f"{whole // size} {unit} {whole % size // small_size} {smaller}"
    return f"{seconds:.1f} s"  # pragma: no cover - every span of a minute or more is above


def json_text(doc: Any, *, indent: int | None = None, ensure_ascii: bool = True) -> str:
    """``doc`` as strict JSON (RFC 8259): a value a command was given and refuses may be a
    NaN or an infinity, which JSON cannot hold (Python would write the bare `NaN` token, which
    strict parsers refuse): such a number is written as its text ("nan", "inf", "-inf"), and
    anything else JSON has no type for as its `str`."""

    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [finite(v) for v in value]
        return value

    return json.dumps(
        finite(doc), default=str, allow_nan=False, indent=indent, ensure_ascii=ensure_ascii
    )


#: The signals a command that drives a robot takes as Ctrl-C (`sigterm_interrupts`) and a
#: long-running process as its shutdown: SIGTERM (systemd, `timeout`, a supervisor) and SIGHUP
#: (an ssh session or terminal that closed). Their default action kills the process at once,
#: with the robot driving on to its goal and nobody watching.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def stdout_line(text: str) -> None:
    """``text`` as one line on stdout, flushed. A reader that went away (EPIPE: `| head -1`)
    ends the output, not the command: the rest goes to /dev/null on stdout's descriptor, as a
    pipeline expects, so a move runs to its end with its exit code, instead of one error line
    per progress event it could not print."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP taken as Ctrl-C is (a command that ends on it as on SIGINT): said as
    that signal (`signal_name`)."""

    signal_name = "SIGTERM"

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        super().__init__()
        self.signal_name = signal_name


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM or SIGHUP (`STOP_SIGNALS`) interrupts the command as Ctrl-C
    does (`Terminated`, a `KeyboardInterrupt`): what it applies on Ctrl-C (a robot's stop
    policy, its outcome document, exit 130) it applies on them too, instead of dying with the
    default action mid-work. The first one only: a later one, while the command stops, is
    ignored, so it cannot cut that stop short. Outside the main thread, nothing."""

    def handler(signum: int, _frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signal.Signals(signum).name)

    try:
        before = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread: signals are not its to take
        yield
        return
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def interrupted(prog: str, signal_name: str = "SIGINT") -> None:
    """A command ended by SIGINT (Ctrl-C), or a SIGTERM it takes alike (`Terminated`), before
    it concluded: `PROG: interrupted (SIGNAL)` on stderr and, when JSON was asked for, its
    document on stdout (a script never reads nothing)."""
    print(f"{prog}: interrupted ({signal_name})", file=sys.stderr)
    sys.stderr.flush()
    if _json_wanted:
        doc = {
            "status": "interrupted",
            "code": "interrupted",
            "message": f"interrupted ({signal_name}) before it concluded",
            "details": {"signal": signal_name},
        }
        print(json.dumps(doc), flush=True)


def error_fields(exc: BaseException) -> tuple[str, str, dict[str, Any]]:
    """An error's (code, one-line message, details): its stable code and message when it has
    them, an OS error's errno name and strerror, else the class name and its text."""
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None)
    details = getattr(exc, "details", None)
    if isinstance(exc, OSError) and not isinstance(code, str):
        from tether._sqlite_files import describe, storage_failure

        where = f": {exc.filename}" if exc.filename else ""
        kind = storage_failure(exc)  # a full or read-only disk: named as the stores name it
        if kind is not None:
            return kind, f"{describe(kind)}: {exc.strerror or first}{where}", {}
        name = errno.errorcode.get(exc.errno or 0, "os_error").lower()
        return name, f"{exc.strerror or first}{where}", {}
    if not isinstance(code, str) or not code:
        from tether._sqlite_files import describe, storage_failure

        kind = storage_failure(exc)  # a failed write of the disk, however it was raised
        if kind is not None:
            return kind, f"{describe(kind)}: {first}", {}
        return type(exc).__name__, first, {}
    if not isinstance(message, str) or not message:
        message = first.removeprefix(f"{code}: ")
    from tether.devices.control import owner_code, owner_words

    owner = owner_code(exc)
    if owner is not None:
        # The device owner's own refusal (a full disk under the daemon, say): its code is the
        # cause, as `tether.client.Client` names it.
        code, message = owner, owner_words(message, owner)
    return (
        code,
        message.splitlines()[0] if message else code,
        (dict(details) if isinstance(details, dict) else {}),
    )


def coded_line(code: str | None, text: str) -> str:
    """A refusal's line naming its stable ``code``: ``code: text``, unless ``text`` already
    starts with it (or there is no code)."""
    return text if not code or text.startswith(f"{code}: ") else f"{code}: {text}"


def nonempty_path(what: str) -> Callable[[str], Path]:
    """An argparse `type` for a directory argument (`what` names it): an empty one (an unset
    shell variable) is refused, never taken as the current directory."""

    def path(text: str) -> Path:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} is empty: give a directory")
        return Path(text)

    return path


def refuse_empty_urls(parser: argparse.ArgumentParser, **flags: str | None) -> None:
    """A store URL flag given as ``""`` (an unset shell variable) is a usage error, never read
    as absent (which would be the data dir's own store); ``flags`` by option name, ``_`` for
    ``-``."""
    for name, url in flags.items():
        if url is not None and not url.strip():
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} is empty: give the store's URL, or leave the flag out")


def warn_url_secrets(prog: str, *, log: logging.Logger | None = None, **flags: str | None) -> None:
    """A warning on stderr for each store URL given on the command line with a password in
    it (``user:secret@`` or ``?password=``): every local user can read a command line (`ps`,
    ``/proc/PID/cmdline``), whatever Tether masks in what it prints. ``flags`` by option
    name (``_`` for ``-``; ``url`` for a positional URL). The command goes on. With ``log``
    (a long-running process's, whose stderr is its log stream: JSON lines off a terminal), a
    record of that log, so the stream stays one format."""
    from tether.storage._urls import redact

    for name, url in flags.items():
        if url is not None and redact(url) != url:
            flag = "URL" if name == "url" else "--" + name.replace("_", "-")
            words = (
                f"the password in {flag} is visible to every local user in this command line"
                " (ps, /proc); give it by PGPASSWORD or a password file (PGPASSFILE) instead"
            )
            if log is not None:
                log.warning(words, extra={"flag": flag})
            else:
                print(f"{prog}: warning: {words}", file=sys.stderr)


def error_line(prog: str, exc: BaseException, suffix: str = "") -> None:
    """An expected error as one line on stderr, `PROG: code: message` (and its JSON document
    when JSON was asked for); with `--debug` (or `TETHER_DEBUG=1`) its traceback first."""
    if debug():
        traceback.print_exception(exc)
    code, message, details = error_fields(exc)
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    if code != type(exc).__name__:
        text = coded_line(code, text)
    refuse(
        prog,
        code,
        message + suffix,
        error=type(exc).__name__,
        details=details,
        line=text + suffix,
    )


__all__ = [
    "PARSERS",
    "HelpFormatter",
    "Parser",
    "debug",
    "describes_default",
    "duration",
    "error_fields",
    "error_line",
    "interrupted",
    "json_wanted",
    "refuse",
    "want_json",
]
