"""Structured logs for the daemon and the CLIs: JSON lines or readable TTY lines, secrets masked.

`setup()` installs one handler on the root logger (a second call replaces it):

- ``"json"`` (the default when the stream is not a TTY): one JSON object per line with ``ts``
  (RFC 3339, UTC, milliseconds), ``level`` (lowercase), ``logger``, ``msg``, then every field
  passed with ``extra=`` (a field named like one of those four gets a trailing ``_``), then
  ``exc`` (the traceback) and ``stack`` when the record has them. A value that is not JSON
  (a path, an object, NaN) is written as its ``str``.
- ``"text"`` (the default on a TTY): ``HH:MM:SS.mmm LEVEL logger: msg key=value ...`` in local
  time, one line per record, the traceback (if any) on the lines after it.

Secrets are never logged: register each at startup (`register_secret`, or a `Redactor` given to
`setup`). The handler's `RedactionFilter` replaces every occurrence of a registered secret with
``[REDACTED]`` in the message (after its arguments are merged), in every field (nested dicts
and lists included, keys too), in the traceback and the stack; and, as a second line of
defence, the formatted line is searched again for each secret and its JSON-escaped form. The
filter rewrites the record itself and the handler goes first on the root logger, so no root
handler sees the secret either (a handler on a named logger runs before the root's: give it
a `RedactionFilter` of its own).

    from tether import _log
    _log.register_secret(token)
    _log.setup(args.log_format, level=args.log_level)   # after _log.add_arguments(parser)
    logging.getLogger("tether.serve").info("listening", extra={"port": 8765})
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import sys
import threading
from collections.abc import Iterable
from typing import Any, TextIO

from tether._coded import CodedError

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "REDACTED",
    "JsonFormatter",
    "LogConfigError",
    "RedactionFilter",
    "Redactor",
    "TextFormatter",
    "UndecodableMetadataFilter",
    "add_arguments",
    "guard_grpc_logs",
    "register_secret",
    "setup",
]

#: What `--log-format` accepts: ``auto`` is text on a TTY, JSON lines otherwise.
LOG_FORMATS = ("auto", "json", "text")
#: What `--log-level` accepts.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: What a secret is replaced with.
REDACTED = "[REDACTED]"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_BASE_KEYS = ("ts", "level", "logger", "msg")


class LogConfigError(CodedError, ValueError):
    """A log setting that is not one (codes ``invalid_log_format``, ``invalid_log_level``,
    ``invalid_secret``)."""


class Redactor:
    """The secrets to mask and how: thread-safe; secrets are only ever added."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        # Longest first, so a secret that contains another is masked whole.
        self._secrets: tuple[str, ...] = ()
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Mask `secret` from now on (its JSON-escaped form too).

        Raises:
            LogConfigError: `secret` is not a non-empty str (``invalid_secret``).
        """
        if not isinstance(secret, str) or not secret:
            raise LogConfigError(
                "invalid_secret",
                f"a secret to mask must be a non-empty str, got {type(secret).__name__}",
            )
        forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        with self._lock:
            held = set(self._secrets) | forms
            self._secrets = tuple(sorted(held, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def redact(self, text: str) -> str:
        """`text` with every registered secret replaced by ``[REDACTED]``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def redact_value(self, value: Any) -> Any:
        """A JSON-ready copy of a field value with every secret masked (see the module doc)."""
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.redact_value(v) for v in value]
        if isinstance(value, bytes | bytearray):
            return self.redact(bytes(value).decode("utf-8", "backslashreplace"))
        return self.redact(str(value))


#: The process's secrets, the ones `setup()` masks unless given another `Redactor`.
SECRETS = Redactor()


def register_secret(secret: str) -> None:
    """Mask `secret` in every log record from now on (call it as soon as a secret is read)."""
    SECRETS.add(secret)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}


class RedactionFilter(logging.Filter):
    """Rewrites each record so no registered secret survives in it (never drops a record)."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or SECRETS

    def filter(self, record: logging.LogRecord) -> bool:
        """Merge the arguments into the message and mask secrets everywhere on the record."""
        r = self.redactor
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record (or raise here)
            message = f"{record.msg!s} (unformattable arguments: {record.args!r})"
        record.msg, record.args = r.redact(message), None
        for key, value in _fields(record).items():
            setattr(record, key, r.redact_value(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = r.redact(record.exc_text)
            # The traceback stays only as text: a formatter must not render it again.
            record.exc_info = None
        if record.stack_info:
            record.stack_info = r.redact(record.stack_info)
        return True


#: The logger grpcio's C core reports a metadata value it cannot decode on (any peer's).
GRPC_CORE_LOGGER = "grpc._cython.cygrpc"
#: At most one line per this many seconds says such values came (with how many since).
UNDECODABLE_LOG_S = 60.0


class UndecodableMetadataFilter(logging.Filter):
    """grpcio logs each metadata value that is not UTF-8 as an ERROR with the value in full and
    a traceback (``Invalid encoding on b'...'``): a bearer token with one stray byte written
    to the log, and a line per call anyone can send without a credential. This rewrites such a
    record into one WARNING naming no value, at most one every `UNDECODABLE_LOG_S` (with the
    count since the last one), and drops the rest; any other record passes unchanged. The call
    itself is refused as it was (its metadata cannot be read)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._said_at: float | None = None
        self._since = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith("Invalid encoding on")):
            return True
        now = record.created
        with self._lock:
            self._since += 1
            if self._said_at is not None and now - self._said_at < UNDECODABLE_LOG_S:
                return False
            count, self._since, self._said_at = self._since, 0, now
        record.msg = (
            "a gRPC peer sent a metadata value that is not UTF-8 (not logged: it may be a"
            " credential); its call is refused"
            + (f" ({count} such values since the last line)" if count > 1 else "")
        )
        record.args = None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_GRPC_GUARD = UndecodableMetadataFilter()


def guard_grpc_logs() -> None:
    """Install `UndecodableMetadataFilter` on grpcio's core logger (once per process): by
    `setup`, and by every gRPC server and client Tether starts, so a process that never set
    up its logs is covered too."""
    logger = logging.getLogger(GRPC_CORE_LOGGER)
    if _GRPC_GUARD not in logger.filters:
        logger.addFilter(_GRPC_GUARD)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module doc for the keys)."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or SECRETS

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line (no trailing newline)."""
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            while key in out:
                key += "_"
            out[key] = self.redactor.redact_value(value)
        exc = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else "")
        if exc:
            out["exc"] = exc
        if record.stack_info:
            out["stack"] = record.stack_info
        line = json.dumps(out, ensure_ascii=False, allow_nan=False, default=str)
        return self.redactor.redact(line)


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c in value for c in ' "=\n\t'):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class TextFormatter(logging.Formatter):
    """``HH:MM:SS.mmm LEVEL logger: msg key=value ...`` for a person at a terminal."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or SECRETS

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line, and its traceback (if any) after it."""
        when = datetime.datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        parts = [
            f"{when}.{int(record.msecs):03d} {record.levelname:<7} {record.name}: "
            + record.getMessage().replace("\n", "\\n")
        ]
        for key, value in _fields(record).items():
            parts.append(f"{key}={_text_value(self.redactor.redact_value(value))}")
        text = " ".join(parts)
        exc = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else "")
        if exc:
            text += "\n" + exc
        if record.stack_info:
            text += "\n" + record.stack_info
        return self.redactor.redact(text)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def setup(
    format: str = "auto",
    *,
    level: str | int = "info",
    stream: TextIO | None = None,
    redactor: Redactor | None = None,
) -> logging.Handler:
    """Send every log record to `stream` (stderr by default) in `format`, secrets masked.

    Args:
        format: ``auto`` (text on a TTY, JSON lines otherwise), ``json`` or ``text``.
        level: the root logger's level: a name from `LOG_LEVELS` or a `logging` number.
        stream: where the lines go.
        redactor: the secrets to mask (`SECRETS`, the ones `register_secret` adds, by default).

    Returns:
        The installed handler (it replaces the one an earlier `setup` installed).

    Raises:
        LogConfigError: an unknown format or level (``invalid_log_format``,
            ``invalid_log_level``); nothing is changed.
    """
    if format not in LOG_FORMATS:
        raise LogConfigError(
            "invalid_log_format",
            f"log format {format!r} is not one of {', '.join(LOG_FORMATS)}",
            details={"format": format, "valid": list(LOG_FORMATS)},
        )
    if isinstance(level, str):
        if level.lower() not in LOG_LEVELS:
            raise LogConfigError(
                "invalid_log_level",
                f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}",
                details={"level": level, "valid": list(LOG_LEVELS)},
            )
        number = logging.getLevelNamesMapping()[level.upper()]
    elif isinstance(level, int) and not isinstance(level, bool) and level >= 0:
        number = level
    else:
        raise LogConfigError(
            "invalid_log_level",
            f"log level must be a name or a logging number, got {level!r}",
            details={"level": repr(level), "valid": list(LOG_LEVELS)},
        )
    out = stream if stream is not None else sys.stderr
    chosen = format if format != "auto" else ("text" if _is_tty(out) else "json")
    secrets = redactor or SECRETS
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter(secrets) if chosen == "json" else TextFormatter(secrets))
    handler.addFilter(RedactionFilter(secrets))
    handler.set_name("tether")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "tether"]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    # First among the root's handlers: its filter masks the record before any other sees it.
    root.handlers.remove(handler)
    root.handlers.insert(0, handler)
    root.setLevel(number)
    guard_grpc_logs()
    return handler


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-format`` and ``--log-level`` (with their defaults) to a command's parser."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="auto",
        help="log lines as JSON or readable text; auto: text on a TTY (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the least severe level logged (default: %(default)s)",
    )
