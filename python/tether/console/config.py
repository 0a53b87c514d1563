"""The operator console's keys of the `[serve]` table (read by `tether.serve.config`, strictly).

```toml
[serve]
console = "127.0.0.1:8766"           # the operator console (HTTP API + page); "off" (default)
console_max_evidence_age_s = 300     # a decision on a read-back older than this is refused
console_session_s = 1800             # a login's session lifetime (fixed, not sliding)
console_stop_token = "$argon2id$..." # optional: the stop token off loopback (hashed, like
                                     # [operators.NAME] credential; `tether operator hash`)
```

The console follows the listener policy (`tether._listen`): loopback unless `[tls]` is
configured (else `insecure_listener`, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tether._config import HostConfigError, Table
from tether._listen import parse_address as listen_address
from tether.devices.credentials import CredentialError, stored_cost

#: The `[serve]` keys this package reads.
CONSOLE_KEYS: Final = (
    "console",
    "console_max_evidence_age_s",
    "console_session_s",
    "console_stop_token",
)
DEFAULT_MAX_EVIDENCE_AGE_S: Final = 300.0
DEFAULT_SESSION_S: Final = 1800.0
#: Every `.code` raised here.
CODES: Final = ("bad_console",)


@dataclass(frozen=True)
class ConsoleConfig:
    """The validated console keys; `address` None: no console."""

    address: tuple[str, int] | None = None
    max_evidence_age_s: float = DEFAULT_MAX_EVIDENCE_AGE_S
    session_s: float = DEFAULT_SESSION_S
    stop_token: str | None = None


def _bad(message: str, **details: object) -> HostConfigError:
    return HostConfigError("bad_console", message, details=dict(details))


def parse_address(text: str) -> tuple[str, int] | None:
    """`HOST:PORT` (port 0: any free port) or None for "off" (`tether._listen.parse_address`)."""
    return listen_address(text, where="serve.console", code="bad_console", example="127.0.0.1:8766")


def parse_console(table: Table) -> ConsoleConfig:
    """The console keys of an already opened `[serve]` table (every default when absent)."""
    address = parse_address(table.text("console", "off"))
    age = table.number("console_max_evidence_age_s", DEFAULT_MAX_EVIDENCE_AGE_S)
    if not 0 < age <= 86_400:
        raise _bad(f"serve.console_max_evidence_age_s {age} is not in (0, 86400]", value=age)
    session = table.number("console_session_s", DEFAULT_SESSION_S)
    if not 10 <= session <= 86_400:
        raise _bad(f"serve.console_session_s {session} is not in [10, 86400]", value=session)
    token = table.optional_text("console_stop_token")
    if token is not None:
        try:
            stored_cost(token, where="serve.console_stop_token")
        except CredentialError as exc:
            raise HostConfigError(exc.code, exc.message, details=exc.details) from None
    return ConsoleConfig(address, age, session, token)


__all__ = [
    "CODES",
    "CONSOLE_KEYS",
    "DEFAULT_MAX_EVIDENCE_AGE_S",
    "DEFAULT_SESSION_S",
    "ConsoleConfig",
    "parse_address",
    "parse_console",
]
