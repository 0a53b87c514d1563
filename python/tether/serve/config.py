"""The `[serve]` table of host.toml: what `tether serve` runs beside the devices it owns.

Read strictly (`tether._config.Table`): an unknown or misspelled key is `unknown_key`, naming
the nearest valid one; every value has a documented default.

```toml
[serve]
data_dir = "/var/lib/tether/moves"   # default: <state_dir>/moves (where `tether move` and
                                     # `tether operator` look without a daemon)
workers = 2                          # worker threads (default: one per robot, at least 2)
sse = "127.0.0.1:8765"               # the AG-UI stream; "127.0.0.1:0" (the default) is any free
                                     # port, shown by `tether status`; "off" serves none
families = ["tether.families.robot_move.family:serve_families"]
                                     # default: robot_move when robots are configured
lease_ms = 30000                     # attempt lease (default 30000)
settle_timeout_s = 30.0              # a move's settle timeout (default 30)
live = "127.0.0.1:0"                 # the live-event WebSocket, /live/<world> (default: any
                                     # free loopback port, shown by `tether status`); "off"
live_origins = ["https://gui.example"]  # browser Origins it accepts (default: none, so only
                                     # clients that send no Origin: not a browser page)
```

The stream follows the listener policy (`tether._listen`): on loopback it needs no principal;
any other address needs the `[tls]` table (else `insecure_listener`, exit 2) and every request
then carries a principal's bearer token (`[planners.NAME]` or `[operators.NAME]`). The live
endpoint follows the same policy and always needs a principal (`tether.serve.live_mount`).
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tether._config import HostConfigError, Table
from tether.activities import MAX_LEASE_MS
from tether.serve.live_mount import DEFAULT_LIVE, LIVE_CODES, LIVE_KEYS, parse_live

SERVE_KEYS: Final = (
    "data_dir",
    "workers",
    "sse",
    "families",
    "lease_ms",
    "settle_timeout_s",
    *LIVE_KEYS,
)
#: The default family factory when robots are configured.
ROBOT_MOVE: Final = "tether.families.robot_move.family:serve_families"
#: The sim reaches' factory (the demo's family), for `families = [...]`.
SIM: Final = "tether.serve.families:sim_families"
DEFAULT_SSE: Final = "127.0.0.1:0"
#: Every `.code` raised here (and the strict table's own).
CODES: Final = ("bad_sse", "bad_workers", "bad_lease", "bad_families", *LIVE_CODES)


@dataclass(frozen=True)
class ServeConfig:
    """The validated `[serve]` table."""

    data_dir: Path
    workers: int
    sse: tuple[str, int] | None
    families: tuple[str, ...]
    lease_ms: int
    settle_timeout_s: float
    live: tuple[str, int] | None = ("127.0.0.1", 0)
    live_origins: tuple[str, ...] = ()


def _error(code: str, message: str, **details: Any) -> HostConfigError:
    return HostConfigError(code, message, details=details)


def parse_sse(text: str, where: str = "serve.sse") -> tuple[str, int] | None:
    """`HOST:PORT` (port 0: any free port), or None for "off". Whether the address may be
    bound (loopback, or TLS with principals) is `tether._listen`'s rule, applied at start."""
    if text == "off":
        return None
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        if not sep or not host or not 0 <= port <= 65535:
            raise ValueError(text)
        address = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        raise _error(
            "bad_sse", f"{where}: {text!r} is not HOST:PORT (for example 127.0.0.1:8765) or off"
        ) from None
    del address  # parsed to check it; whether it may be bound is the listener policy's
    return host, port


def parse_serve(raw: Any, *, state_dir: Path, robots: int) -> ServeConfig:
    """The `[serve]` table (`raw`, absent: every default) of a config with `robots` robots."""
    table = Table(raw if raw is not None else {}, "serve", SERVE_KEYS)
    data_dir = Path(table.text("data_dir", str(state_dir / "moves")))
    workers = table.integer("workers", max(2, robots))
    if not 1 <= workers <= 64:
        raise _error("bad_workers", f"serve.workers {workers} is not 1..64")
    sse = parse_sse(table.text("sse", DEFAULT_SSE))
    if "families" in table:
        families = table.array("families")
        if not families or not all(isinstance(f, str) and ":" in f for f in families):
            raise _error(
                "bad_families", "serve.families must be a non-empty list of 'module:function'"
            )
    else:
        families = [ROBOT_MOVE] if robots else []
    if not families:
        raise _error(
            "bad_families", "no family to serve: configure a robot or serve.families (e.g. sim)"
        )
    lease_ms = table.integer("lease_ms", 30_000)
    if not 1 <= lease_ms <= MAX_LEASE_MS:
        raise _error("bad_lease", f"serve.lease_ms {lease_ms} is not 1..{MAX_LEASE_MS}")
    settle = table.number("settle_timeout_s", 30.0)
    if not 0 < settle <= 3600:
        raise _error("bad_lease", f"serve.settle_timeout_s {settle} is not in (0, 3600]")
    live, live_origins = parse_live(table)
    return ServeConfig(
        data_dir, workers, sse, tuple(families), lease_ms, settle, live, live_origins
    )


def load_serve(path: str | os.PathLike[str], *, state_dir: Path, robots: int) -> ServeConfig:
    """The `[serve]` table of the host configuration at `path` (already validated otherwise)."""
    raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return parse_serve(raw.get("serve"), state_dir=state_dir, robots=robots)


def data_dir_for(config: Any) -> Path:
    """The Host data dir of a host configuration: `[serve] data_dir`, else `<state_dir>/moves`
    (what `tether move` and `tether operator` use with no daemon, and the daemon's default)."""
    state_dir = Path(config.state_dir)
    try:
        raw = tomllib.loads(Path(config.path).read_text(encoding="utf-8")).get("serve")
    except (OSError, tomllib.TOMLDecodeError):
        raw = None
    table = Table(raw if raw is not None else {}, "serve", SERVE_KEYS)
    return Path(table.text("data_dir", str(state_dir / "moves")))


__all__ = [
    "CODES",
    "DEFAULT_LIVE",
    "DEFAULT_SSE",
    "SERVE_KEYS",
    "ServeConfig",
    "data_dir_for",
    "load_serve",
    "parse_serve",
]
