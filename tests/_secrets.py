"""The suite's secrets and the recorder that proves none of them leaks.

Issue 12: "a test searches every log line and every `--json` output of the suite's runs for each
configured secret". The secrets searched for are

- the ones declared here (`OPERATOR`, `PLANNER`, `OBSERVER`: tests that configure principals
  take their secrets from this module), and
- every secret the suite's own process hashes into a credential (argon2's
  `PasswordHasher.hash`, however it is reached), at least `MIN_LEN` characters long (a
  shorter one, such as the ``"x"`` a hashing test uses, would match unrelated text), and
- the first line a test writes to a child's stdin when the child reads a credential there
  (`--credential-stdin`, `tether operator hash`).

What is searched (`RECORDER`, installed by tests/conftest.py for the whole session):

- the stdout and stderr of every child process a test collects (`Popen.communicate`, which
  `subprocess.run` and `check_output` use);
- every log record of the test process (a root handler: the message, its extra fields, the
  traceback), and pytest's captured output and log sections of every test;
- the log-like files (`LOG_FILE_PATTERNS`: daemon logs, episode stderr) tests leave under
  the session's temporary directory.

Each output is searched as it is and percent-decoded, for each secret as it is, JSON-escaped
and URL-quoted.

The last test (`tests/test_zz_secret_scan.py`, ordered last) scans all of it and fails naming
the secret and where it appeared. Run on a subset of the suite, it scans what that subset ran.

`make pytest` runs the suite on several processes (pytest-xdist), then the scan on its own:
with `RECORDINGS` (an environment variable naming a directory) set, each process of the suite
dumps what it recorded there as it ends (`Recorder.dump`, its temporary directory among its
log roots), and the scan loads every dump before it searches.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import threading
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: An operator's credential, a planner's token and an observer's token for test configs.
OPERATOR = "op-credential-7f3a9c1e-battery-staple"
PLANNER = "planner-token-5b2d8e6f-orbit-lantern"
OBSERVER = "observer-token-c41a0d93-quiet-harbor"
DECLARED = (OPERATOR, PLANNER, OBSERVER)

#: Hashed secrets shorter than this are not searched for (they would match unrelated text).
MIN_LEN = 8
#: Files under the session's temporary directory that are logs (searched at the end).
LOG_FILE_PATTERNS = ("*.log", "*.jsonl", "*stderr*", "*stdout*", "*.out", "*.err")
#: A file larger than this is searched in its first and last half of it.
MAX_FILE_BYTES = 8 * 1024 * 1024

_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


@dataclass(frozen=True)
class Leak:
    """A secret found in recorded output."""

    secret: str = field(repr=False)
    where: str
    context: str

    def __str__(self) -> str:
        return f"secret {self.secret[:6]}... appeared in {self.where}: ...{self.context}..."


def forms(secret: str) -> set[str]:
    """The ways a secret can be written in output: as is, JSON-escaped, URL-quoted."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    }


class Recorder:
    """What a session's runs wrote, and the secrets to look for in it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.secrets: set[str] = set(DECLARED)
        self.texts: list[tuple[str, str]] = []
        self.roots: list[Path] = []

    def secret(self, value: str) -> None:
        """Search for `value` too (ignored when shorter than `MIN_LEN`)."""
        if isinstance(value, str) and len(value) >= MIN_LEN:
            with self._lock:
                self.secrets.add(value)

    def record(self, where: str, text: str | bytes | None) -> None:
        """Keep one output (bytes are decoded leniently) to be searched at the end."""
        if not text:
            return
        if isinstance(text, bytes | bytearray):
            text = bytes(text).decode("utf-8", "replace")
        with self._lock:
            self.texts.append((where, text))

    def dump(self, path: Path) -> None:
        """Write what this process recorded (its secrets, outputs and log roots) to `path`,
        for a scan in another process (`load`): the suite's processes each dump theirs."""
        with self._lock:
            doc = {
                "secrets": sorted(self.secrets),
                "texts": self.texts,
                "roots": [str(r) for r in self.roots],
            }
        path.write_text(json.dumps(doc))

    def load(self, path: Path) -> None:
        """Add what another process recorded and dumped (`dump`)."""
        doc = json.loads(path.read_text())
        with self._lock:
            self.secrets.update(doc["secrets"])
            self.texts.extend((str(w), str(t)) for w, t in doc["texts"])
            self.roots.extend(Path(r) for r in doc["roots"])

    def files_under(self, root: Path) -> None:
        """Search the log-like files under `root` at the end."""
        with self._lock:
            self.roots.append(root)

    def _files(self) -> Iterable[tuple[str, str]]:
        for root in self.roots:
            if not root.is_dir():
                continue
            for path in root.rglob("*"):
                if not any(fnmatch.fnmatch(path.name, p) for p in LOG_FILE_PATTERNS):
                    continue
                try:
                    if not path.is_file():
                        continue
                    with path.open("rb") as handle:
                        data = handle.read(MAX_FILE_BYTES + 1)
                        if len(data) > MAX_FILE_BYTES:
                            handle.seek(-MAX_FILE_BYTES // 2, 2)
                            data = data[: MAX_FILE_BYTES // 2] + handle.read()
                except OSError:
                    continue
                yield f"file {path}", data.decode("utf-8", "replace")

    def scan(self) -> list[Leak]:
        """Every place a secret appears in what was recorded."""
        with self._lock:
            texts = list(self.texts)
            secrets = sorted(self.secrets)
        patterns = {form: secret for secret in secrets for form in forms(secret)}
        leaks: list[Leak] = []
        seen: set[tuple[str, str]] = set()

        def mask(text: str) -> str:  # a failure message must not repeat the secret
            for form in sorted(patterns, key=len, reverse=True):
                text = text.replace(form, "<SECRET>")
            return text

        for where, raw in [*texts, *self._files()]:
            # A URL may percent-encode any character: search its decoded form too.
            decoded = urllib.parse.unquote_plus(raw) if "%" in raw else raw
            for form, secret in patterns.items():
                text = raw if form in raw else decoded
                at = text.find(form)
                if at >= 0 and (secret, where) not in seen:
                    seen.add((secret, where))
                    context = text[max(0, at - 60) : at + len(form) + 20].replace("\n", "\\n")
                    leaks.append(Leak(secret, mask(where), mask(context)))
        return leaks


class LogRecorder(logging.Handler):
    """A root handler keeping every record's message, fields and traceback for the scan."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(logging.NOTSET)
        self.recorder = recorder
        self.set_name("tests-secret-recorder")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = f"{record.msg!s} {record.args!r}"
        fields: dict[str, Any] = {
            k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS
        }
        parts = [message, json.dumps(fields, default=str, ensure_ascii=False)]
        if record.exc_text:
            parts.append(record.exc_text)
        elif record.exc_info:
            parts.append(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            parts.append(record.stack_info)
        self.recorder.record(f"log record {record.name}", "\n".join(parts))


#: The environment variable naming the directory the suite's processes dump their recordings
#: to, and the scan loads them from.
RECORDINGS = "TETHER_SECRET_RECORDINGS"

#: The session's recorder (tests/conftest.py installs it).
RECORDER = Recorder()
