"""Principals: named operators and planner tokens, each with an argon2id hash and a role.

Rules:
- A principal is `[operators.NAME] credential` or `[planners.NAME] token` in `host.toml`,
  with a `role`. What each role may do (`PERMISSIONS`, one table for every listener):
  `operator` decides, resumes and reboots, and reads; `planner` submits, watches and stops
  work, and reads the stream; `observer` only reads.
- A credential or token is stored only as an argon2id hash (`argon2-cffi`), made by
  `tether operator hash`. The cost parameters of a stored hash are checked against
  `MINIMUM` (and against `MAXIMUM`, so a hostile config cannot make a check cost minutes)
  before the hash is ever used: a weaker or non-argon2id hash is refused at load
  (`weak_credential`), never verified with the parameters it happens to name.
- The old `scrypt$N$r$p$...` format is refused with what to do (`old_credential_format`).
- A secret identifies its principal: the decision records the name of the principal whose
  hash the secret matches, never a name given on the command line. One lookup
  (`Authenticator.authenticate(secret, roles=...)`) covers every principal; only the daemon
  calls it, against its own `host.toml`.
- Failed attempts are rate-limited per state dir (`RATE_LIMIT` failures in `RATE_WINDOW_S`
  lock further attempts out until the window passes: `credential_rate_limited`), across
  processes (a file under the state dir, updated under `flock`).
- Secrets come from stdin, a prompt or a 0600 file (`read_secret`), never argv or the
  environment by default; they are never logged or printed.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import argon2
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from tether._coded import CodedError

#: Roles a principal may hold (see `PERMISSIONS`).
ROLES: Final = ("operator", "observer", "planner")

#: What each role may do. A listener asks `roles_for(action)` which roles it accepts.
PERMISSIONS: Final[dict[str, frozenset[str]]] = {
    # The human who answers for the robots may always stop them, over every listener.
    "operator": frozenset({"decide", "resume", "reboot", "stop", "read"}),
    "planner": frozenset({"submit", "watch", "stop", "read"}),
    "observer": frozenset({"read"}),
}
#: Every action some role may take (`read` covers the SSE stream, status, list and show).
ACTIONS: Final = tuple(sorted(set().union(*PERMISSIONS.values())))

#: The host.toml table of each role's principals, the key holding its hash, and the roles a
#: principal of that table may hold.
TABLES: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "operators": ("credential", ("operator", "observer")),
    "planners": ("token", ("planner", "observer")),
}


def roles_for(action: str) -> tuple[str, ...]:
    """The roles allowed to take `action` (one of `ACTIONS`), in `ROLES` order."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r} (known: {', '.join(ACTIONS)})")
    return tuple(r for r in ROLES if action in PERMISSIONS[r])


@dataclass(frozen=True)
class Cost:
    """argon2id cost parameters (memory in KiB)."""

    time_cost: int
    memory_cost: int
    parallelism: int
    hash_len: int
    salt_len: int


#: The weakest parameters a stored hash may have (OWASP's argon2id floor: 19 MiB, t=2, p=1).
MINIMUM: Final = Cost(time_cost=2, memory_cost=19_456, parallelism=1, hash_len=32, salt_len=16)
#: The strongest a stored hash may name (a larger one would make every check a denial of service).
MAXIMUM: Final = Cost(time_cost=16, memory_cost=1_048_576, parallelism=16, hash_len=64, salt_len=64)
#: What `tether operator hash` uses (RFC 9106's second recommendation, low memory).
DEFAULT: Final = Cost(time_cost=3, memory_cost=65_536, parallelism=4, hash_len=32, salt_len=16)

RATE_LIMIT: Final = 5
RATE_WINDOW_S: Final = 60.0

#: Every `.code` a CredentialError carries.
CODES: Final = (
    "credential_ambiguous",
    "credential_rate_limited",
    "excessive_credential_cost",
    "credential_refused",
    "empty_credential",
    "insecure_secret_file",
    "old_credential_format",
    "role_refused",
    "short_passphrase",
    "short_token",
    "unreadable_secret_file",
    "weak_credential",
)


class CredentialError(CodedError):
    """A credential was refused, or a stored hash is unusable; `code` is one of `CODES`."""


def _error(code: str, message: str, **details: Any) -> CredentialError:
    if code not in CODES:
        raise ValueError(f"unlisted credential code {code!r}")
    return CredentialError(code, message, details=details)


def _hasher(cost: Cost) -> PasswordHasher:
    return PasswordHasher(
        time_cost=cost.time_cost,
        memory_cost=cost.memory_cost,
        parallelism=cost.parallelism,
        hash_len=cost.hash_len,
        salt_len=cost.salt_len,
        type=argon2.Type.ID,
    )


#: The fewest characters a planner's token may have: a token is a machine's secret, made
#: random and long (`python -c "import secrets; print(secrets.token_urlsafe(32))"`), and
#: a client that may guess five times a minute per address must not find it.
MIN_TOKEN_CHARS = 16
#: The shortest passphrase a person's credential (an operator's, an observer's) may be hashed
#: from: an operator's credential re-issues moves and resumes stopped robots.
MIN_PASSPHRASE_CHARS = 8


def check_new_secret(secret: str, role: str) -> None:
    """Refuse a planner token shorter than `MIN_TOKEN_CHARS` (`short_token`), or a person's
    passphrase (an operator's, an observer's) shorter than `MIN_PASSPHRASE_CHARS`
    (`short_passphrase`), before it is hashed into a host.toml (`tether operator hash`). An
    empty one is left to `hash_secret`, which refuses it (`empty_credential`)."""
    if secret and role != "planner" and len(secret) < MIN_PASSPHRASE_CHARS:
        raise _error(
            "short_passphrase",
            f"an {role}'s passphrase needs at least {MIN_PASSPHRASE_CHARS} characters (this"
            f" one has {len(secret)})"
            + (": it re-issues moves and resumes stopped robots" if role == "operator" else ""),
            minimum=MIN_PASSPHRASE_CHARS,
        )
    if role == "planner" and len(secret) < MIN_TOKEN_CHARS:
        raise _error(
            "short_token",
            f"a planner token needs at least {MIN_TOKEN_CHARS} characters (this one has"
            f' {len(secret)}): make a random one, e.g. `python -c "import secrets;'
            ' print(secrets.token_urlsafe(32))"`',
            minimum=MIN_TOKEN_CHARS,
        )


def hash_secret(secret: str, cost: Cost = DEFAULT) -> str:
    """The argon2id hash to store in `[operators.NAME] credential` or `[planners.NAME] token`
    instead of the secret."""
    if not secret:
        raise _error("empty_credential", "the credential must not be empty")
    check_cost(cost, where="the requested parameters")
    return _hasher(cost).hash(secret)


def check_cost(cost: Cost, *, where: str) -> None:
    """Refuse parameters below `MINIMUM` or above `MAXIMUM`."""
    for name in ("time_cost", "memory_cost", "parallelism", "hash_len", "salt_len"):
        value, low, high = getattr(cost, name), getattr(MINIMUM, name), getattr(MAXIMUM, name)
        if not low <= value <= high:
            raise _error(
                "weak_credential" if value < low else "excessive_credential_cost",
                f"{where}: argon2id {name}={value} is outside {low}..{high}; "
                "make a new one with `tether operator hash`",
                parameter=name,
                value=value,
            )


def stored_cost(stored: str, *, where: str) -> Cost:
    """The parameters of a stored hash, checked (never trusted) before the hash is used."""
    if stored.startswith("scrypt$"):
        raise _error(
            "old_credential_format",
            f"{where}: the scrypt credential format is no longer accepted; run "
            "`tether operator hash --name NAME` and replace it with the [operators.NAME] table "
            "it prints",
        )
    if not stored.startswith("$argon2id$"):
        raise _error(
            "weak_credential",
            f"{where}: not an argon2id hash (make one with `tether operator hash`)",
        )
    try:
        params = argon2.extract_parameters(stored)
    except InvalidHashError:
        raise _error("weak_credential", f"{where}: malformed argon2id hash") from None
    if params.type is not argon2.Type.ID or params.version != argon2.low_level.ARGON2_VERSION:
        raise _error("weak_credential", f"{where}: not an argon2id v19 hash")
    cost = Cost(
        params.time_cost, params.memory_cost, params.parallelism, params.hash_len, params.salt_len
    )
    check_cost(cost, where=where)
    return cost


@dataclass(frozen=True)
class Principal:
    """A named principal from the host configuration: its role and its checked hash.

    `table` is where it is configured (`operators` or `planners`); `credential` is its hash.
    """

    name: str
    role: str
    credential: str = field(repr=False)
    cost: Cost = field(repr=False)
    table: str = "operators"

    @property
    def where(self) -> str:
        """How messages name it: ``operators.ann``, ``planners.ci``."""
        return f"{self.table}.{self.name}"

    def may(self, action: str) -> bool:
        """Whether this principal's role allows `action`."""
        return self.role in roles_for(action)

    def matches(self, secret: str) -> bool:
        try:
            return bool(_hasher(self.cost).verify(self.credential, secret))
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False


class RateLimiter:
    """Failed credential attempts per state dir and per source, shared by every process (flock
    on a 0600 file).

    A source names where attempts come from: ``local`` (the control socket's same-uid peers,
    the CLI) or ``net:<address>`` (a network listener's peer), so a network client guessing
    tokens locks out its own address, never the local operator. At most `MAX_SOURCES` sources
    are kept (the stalest are forgotten first).
    """

    MAX_SOURCES: Final = 1024

    def __init__(self, path: Path, *, limit: int = RATE_LIMIT, window_s: float = RATE_WINDOW_S):
        self.path = path
        self.limit = limit
        self.window_s = window_s

    def _update(self, source: str, change: Any) -> list[float]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+") as handle:
                try:
                    raw = json.loads(handle.read() or "{}")
                except ValueError:
                    raw = {}
                if isinstance(raw, list):  # the one-bucket format of earlier versions
                    raw = {"local": raw}
                now = time.time()
                table: dict[str, list[float]] = {}
                for key, times in raw.items() if isinstance(raw, dict) else ():
                    try:
                        kept = [float(t) for t in times if now - float(t) < self.window_s]
                    except (ValueError, TypeError):
                        continue
                    if kept:
                        table[str(key)] = kept
                failures = change(table.get(source, []), now)
                if failures:
                    table[source] = failures
                else:
                    table.pop(source, None)
                if len(table) > self.MAX_SOURCES:
                    for stale in sorted(table, key=lambda k: max(table[k]))[: -self.MAX_SOURCES]:
                        del table[stale]
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(table))
                handle.flush()
                os.fsync(handle.fileno())
            return list(failures)
        finally:
            os.close(fd)

    def check(self, source: str = "local") -> None:
        """Refuse an attempt from `source` while too many of its attempts failed recently
        (before the secret is tried)."""
        failures = self._update(source, lambda f, now: f)
        if len(failures) >= self.limit:
            wait = max(0.0, self.window_s - (time.time() - min(failures)))
            raise _error(
                "credential_rate_limited",
                f"{len(failures)} failed credential attempts in {self.window_s:.0f} s: "
                f"try again in {wait:.0f} s",
                retry_after_s=round(wait, 1),
            )

    def failed(self, source: str = "local") -> None:
        self._update(source, lambda f, now: [*f, now])

    def succeeded(self, source: str = "local") -> None:
        self._update(source, lambda f, now: [])


#: One credential check at a time per source in one process (`_one_at_a_time`).
_SOURCES: dict[str, threading.Lock] = {}
_SOURCES_LOCK = threading.Lock()
#: Sources whose lock is kept; past it, the locks no check holds are dropped.
_SOURCES_KEPT: Final = 1024


def _one_at_a_time(source: str) -> threading.Lock:
    """The lock that makes one source's checks run one after the other: each reads and counts
    the source's failures around its own verification, so a burst of guesses from one source
    is counted before more are tried. Sources never wait on each other (a Stop's source is
    apart from its address's other calls, and the local operator from every network peer)."""
    with _SOURCES_LOCK:
        lock = _SOURCES.get(source)
        if lock is None:
            if len(_SOURCES) >= _SOURCES_KEPT:
                for key in [k for k, held in _SOURCES.items() if not held.locked()]:
                    del _SOURCES[key]
            lock = _SOURCES[source] = threading.Lock()
        return lock


def authenticate(
    principals: Mapping[str, Principal],
    secret: str | None,
    *,
    limiter: RateLimiter | None,
    roles: Iterable[str] = ("operator",),
    source: str = "local",
) -> Principal:
    """The principal `secret` belongs to, holding one of `roles`; refused (rate-limited)
    otherwise. The rate limit is checked before the secret is tried; a wrong secret counts as a
    failure, a right one clears them (also when its role is then refused); both count for
    `source` only (`RateLimiter`)."""
    wanted = tuple(roles)
    unknown = [r for r in wanted if r not in ROLES]
    if unknown or not wanted:
        raise ValueError(f"roles must be some of {ROLES}, got {wanted!r}")  # a code bug
    # One check at a time per source (`_one_at_a_time`): concurrent guesses from one source
    # cannot all pass the check before any failure is counted, nor hold argon2's memory at
    # once; other sources, a Stop's among them, never wait for them.
    with _one_at_a_time(source):
        if limiter is not None:
            limiter.check(source)
        if not secret:
            raise _error("credential_refused", "a valid credential is required")
        matched = [p for p in principals.values() if p.matches(secret)]
        if not matched:
            if limiter is not None:
                limiter.failed(source)
            raise _error("credential_refused", "a valid credential is required")
    if len(matched) > 1:
        raise _error(
            "credential_ambiguous",
            "this credential matches more than one principal; give each its own",
            principals=sorted(p.where for p in matched),
        )
    principal = matched[0]
    if principal.role not in wanted:
        # The right secret of the wrong role: no failure, and no success either (one would
        # clear the source's failures: an observer's credential between guesses of an
        # operator's would keep the lockout from ever coming).
        raise _error(
            "role_refused",
            f"{principal.where} has role {principal.role}, this needs {' or '.join(wanted)}",
            principal=principal.name,
            role=principal.role,
            needs=list(wanted),
        )
    if limiter is not None:
        limiter.succeeded(source)
    return principal


class Authenticator:
    """The one lookup over every principal of a host (operators and planners), rate-limited
    per state dir. A daemon builds it from its own `host.toml` (`HostConfig.authenticator()`);
    a CLI never verifies a credential itself."""

    def __init__(self, principals: Mapping[str, Principal], limiter: RateLimiter | None) -> None:
        self._principals = dict(principals)
        self.limiter = limiter

    @property
    def principals(self) -> dict[str, Principal]:
        """Every principal, keyed by name."""
        return dict(self._principals)

    def authenticate(
        self, secret: str | None, *, roles: Iterable[str], source: str = "local"
    ) -> Principal:
        """The principal `secret` belongs to, holding one of `roles` (`roles_for(action)`);
        failures are rate-limited per `source` (``local``, or ``net:<address>``).

        Raises:
            CredentialError: `credential_refused` (no secret, or none matches),
                `credential_rate_limited` (too many failures: `details["retry_after_s"]`),
                `role_refused`, `credential_ambiguous`.
        """
        return authenticate(
            self._principals, secret, limiter=self.limiter, roles=roles, source=source
        )


def _toml_key(name: str) -> str:
    if name and all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
        return name
    return json.dumps(name)  # a TOML basic string: JSON's escapes are TOML's


def principal_table(name: str, role: str, hashed: str) -> str:
    """The host.toml table `tether operator hash` prints: ``[operators.NAME]`` with
    ``credential`` for an operator or observer, ``[planners.NAME]`` with ``token`` for a
    planner."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    table = "planners" if role == "planner" else "operators"
    key = TABLES[table][0]
    return f'[{table}.{_toml_key(name)}]\n{key} = "{hashed}"\nrole = "{role}"'


def check_private(path: Path) -> None:
    """Refuse a secret file (a token, a private key) that is not this uid's own, mode 0600
    (`insecure_secret_file`); an `OSError` when it cannot be looked at."""
    info = path.stat()
    if stat.S_IMODE(info.st_mode) & 0o077 or info.st_uid != os.getuid():
        raise _error(
            "insecure_secret_file",
            f"{path} must be owned by you and mode 0600 (chmod 600 {path})",
            path=str(path),
        )


def read_secret(
    *, file: str | None = None, stdin: IO[str] | None = None, prompt: str = "credential: "
) -> str:
    """A secret from a 0600 file, else one line of stdin when it is not a terminal, else a
    prompt that does not echo. Never from argv or the environment."""
    if file is not None:
        path = Path(file)
        try:
            if path.is_dir():  # a directory's mode is no secret file's: never `chmod 600` it
                raise _error(
                    "unreadable_secret_file",
                    f"{path} is a directory: give the file that holds the secret",
                    path=str(path),
                )
            check_private(path)
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise _error(
                "unreadable_secret_file", f"{path} is not UTF-8 text", path=str(path)
            ) from None
        except OSError as exc:  # missing, or not ours to read: one coded line
            raise _error(
                "unreadable_secret_file",
                f"{path} cannot be read: {exc.strerror or exc}",
                path=str(path),
            ) from None
        return text.splitlines()[0] if text.strip("\r\n") else ""
    stream = stdin if stdin is not None else sys.stdin
    if stream.isatty():
        try:
            return getpass.getpass(prompt)
        except EOFError:  # Ctrl-D at the prompt: no credential, said as one
            print(file=sys.stderr)  # the prompt's line ends here
            raise _error(
                "empty_credential", "no credential was given: the input ended (Ctrl-D)"
            ) from None
    return stream.readline().rstrip("\n")


__all__ = [
    "ACTIONS",
    "CODES",
    "DEFAULT",
    "MAXIMUM",
    "MINIMUM",
    "PERMISSIONS",
    "ROLES",
    "TABLES",
    "Authenticator",
    "Cost",
    "CredentialError",
    "Principal",
    "RateLimiter",
    "authenticate",
    "check_cost",
    "check_private",
    "hash_secret",
    "principal_table",
    "read_secret",
    "roles_for",
    "stored_cost",
]
