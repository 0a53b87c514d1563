"""The `[serve]` table of host.toml: what `tether serve` runs beside the devices it owns.

Read strictly (`tether._config.Table`): an unknown or misspelled key is `unknown_key`, naming
the nearest valid one; every value has a documented default.

```toml
[serve]
data_dir = "/var/lib/tether/moves"   # default: <state_dir>/moves (where `tether move` and
                                     # `tether operator` look without a daemon)
workers = 2                          # worker threads (default: one per robot, at least 2;
                                     # 0: no claims, the daemon only answers and decides)
sse = "127.0.0.1:8765"               # the AG-UI stream; "127.0.0.1:0" (the default) is any free
                                     # port, shown by `tether status`; "off" serves none
families = ["tether.families.robot_move.family:serve_families"]
                                     # default: robot_move when robots are configured
lease_ms = 30000                     # attempt lease (default 30000)
settle_timeout_s = 30.0              # a move's settle timeout (default 30)
catalog = "postgresql://db.lab/tether"  # default: catalog.db in data_dir (also --catalog URL)
world = "postgresql://db.lab/tether"    # default: world.db in data_dir (also --world URL)
host_name = "arm-host-1"             # default: the hostname; device work is bound to it
console = "127.0.0.1:8767"           # the operator console; "off" (the default): none
                                     # (its other keys: tether.console.config)
grpc = "127.0.0.1:50051"             # the RobotControl gRPC service (tether.serve.grpc_server);
                                     # "off" (the default) serves none; port 0: any free port;
                                     # an address off loopback needs [tls]
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

import functools
import os
import socket
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

from tether._config import HostConfigError, Table
from tether._listen import address_text, parse_address
from tether.activities import MAX_LEASE_MS
from tether.console.config import CONSOLE_KEYS, ConsoleConfig, parse_console
from tether.devices.config import config_relative, in_file, read_config_text
from tether.runtime._worker import MAX_WORKERS
from tether.serve.live_mount import DEFAULT_LIVE, LIVE_CODES, LIVE_KEYS, parse_live
from tether.storage._urls import SHARED_HOST_RULE

SERVE_KEYS: Final = (
    "data_dir",
    "workers",
    "sse",
    "families",
    "lease_ms",
    "settle_timeout_s",
    "catalog",
    "world",
    "host_name",
    *CONSOLE_KEYS,  # the operator console's (tether.console.config)
    "grpc",
    *LIVE_KEYS,
)
#: The default family factory when robots are configured.
ROBOT_MOVE: Final = "tether.families.robot_move.family:serve_families"
#: The sim reaches' factory (the demo's family), for `families = [...]`.
SIM: Final = "tether.serve.families:sim_families"
DEFAULT_SSE: Final = "127.0.0.1:0"
#: `[serve] lease_ms` and `settle_timeout_s` when not given.
DEFAULT_LEASE_MS: Final = 30_000
DEFAULT_SETTLE_TIMEOUT_S: Final = 30.0
#: Every `.code` raised here (and the strict table's own).
CODES: Final = (
    "bad_sse",
    "bad_workers",
    "bad_lease",
    "bad_settle_timeout",
    "bad_families",
    "bad_host_name",
    "bad_grpc",
    "bad_store_url",
    "bad_data_dir",
    *LIVE_CODES,
)


@dataclass(frozen=True)
class ServeConfig:
    """The validated `[serve]` table."""

    data_dir: Path
    workers: int
    sse: tuple[str, int] | None
    families: tuple[str, ...]
    lease_ms: int
    settle_timeout_s: float
    #: The Activity catalog and the world ledger (None: SQLite files in `data_dir`); a
    #: ``postgresql://`` URL shares them with other hosts (its password from PGPASSWORD or
    #: PGPASSFILE, never the URL in a log).
    catalog_url: str | None = None
    world_url: str | None = None
    #: This host's name: device work admitted here is bound to it (claimed only here).
    host_name: str = ""
    console: ConsoleConfig = field(default_factory=ConsoleConfig)  # off by default
    #: The gRPC listener (host, port), or None ("off", the default).
    grpc: tuple[str, int] | None = None
    live: tuple[str, int] | None = ("127.0.0.1", 0)
    live_origins: tuple[str, ...] = ()


def _error(code: str, message: str, **details: Any) -> HostConfigError:
    return HostConfigError(code, message, details=details)


def _store_url(table: Table, key: str) -> str | None:
    """`[serve] catalog` or `world`: None when absent (the data dir's SQLite file). An empty
    value (a template's unset variable, say) is refused, never read as absent: a host would
    otherwise run on a store of its own instead of the shared one."""
    url = table.optional_text(key)
    if url is not None and not url.strip():
        raise _error(
            "bad_store_url",
            f"serve.{key} is empty: give the store's URL, or leave the key out for the data"
            f" dir's own {key} file",
            key=f"serve.{key}",
        )
    return url


def parse_sse(text: str, where: str = "serve.sse") -> tuple[str, int] | None:
    """`HOST:PORT` (port 0: any free port), or None for "off" (`tether._listen.parse_address`)."""
    return parse_address(text, where=where, code="bad_sse", example="127.0.0.1:8765")


def parse_grpc(text: str, where: str = "serve.grpc") -> tuple[str, int] | None:
    """`HOST:PORT` (port 0: any free port), or None for "off" (`tether._listen.parse_address`)."""
    return parse_address(text, where=where, code="bad_grpc", example="127.0.0.1:50051")


#: Hosts that bind every address: of every family ("" and "::", dual-stack), or of IPv4.
_EVERY_HOST: Final = ("", "::", "[::]")
_EVERY_IPV4: Final = "0.0.0.0"


def _overlap(one: str, other: str) -> bool:
    """Whether listeners on hosts `one` and `other` (one port) would bind one socket address
    (``localhost`` is the loopback address of each family)."""
    loopback = {"localhost", "127.0.0.1", "::1"}
    if "localhost" in (one, other) and one in loopback and other in loopback:
        return True
    if one == other or one in _EVERY_HOST or other in _EVERY_HOST:
        return True
    if _EVERY_IPV4 in (one, other):  # every IPv4 address: not an IPv6 one
        return ":" not in (other if one == _EVERY_IPV4 else one)
    return False


def _check_apart(listeners: Sequence[tuple[str, str, tuple[str, int] | None]]) -> None:
    """Refuse two listeners given one port (a fixed one, on the same host or on every host):
    the second could never bind, and would fail at start with the bind's own words. Its
    code names the later listener's key (``bad_grpc`` for `grpc`, ...)."""
    seen: list[tuple[str, tuple[str, int]]] = []
    for key, code, address in listeners:
        if address is None or address[1] == 0:
            continue
        host, port = address
        for other, (other_host, other_port) in seen:
            if port == other_port and _overlap(host, other_host):
                raise _error(
                    code,
                    f"serve.{key} {address_text(host, port)} takes serve.{other}'s port"
                    f" ({address_text(other_host, other_port)}): give each listener its own"
                    " port (0: any free one)",
                )
        seen.append((key, address))


def parse_serve(
    raw: Any, *, state_dir: Path, robots: int, path: Path = Path("<memory>")
) -> ServeConfig:
    """The `[serve]` table (`raw`, absent: every default) of the config at `path` with `robots`
    robots (a relative `data_dir` is taken from that file's directory)."""
    table = Table(raw if raw is not None else {}, "serve", SERVE_KEYS)
    data_dir = config_relative(path, table.path("data_dir", str(state_dir / "moves")))
    if os.path.realpath(data_dir) == os.path.realpath(state_dir):
        # Each holds the daemon's lock: one file locked twice, and the daemon refused itself.
        raise _error(
            "bad_data_dir",
            f"serve.data_dir {data_dir} is host.state_dir: give the stores a directory of"
            f" their own (the default: {state_dir / 'moves'})",
        )
    workers = table.integer("workers", max(2, robots))
    if not 0 <= workers <= MAX_WORKERS:
        raise _error("bad_workers", f"serve.workers {workers} is not 0..{MAX_WORKERS}")
    sse = parse_sse(table.text("sse", DEFAULT_SSE))
    if "families" in table:
        families = table.array("families")
        if not families or not all(isinstance(f, str) and ":" in f for f in families):
            raise _error(
                "bad_families", "serve.families must be a non-empty list of 'module:function'"
            )
        twice = sorted({f for f in families if families.count(f) > 1})
        if twice:  # each of its kinds would be served by two families
            raise _error("bad_families", f"serve.families lists {twice[0]!r} twice")
    else:
        families = [ROBOT_MOVE] if robots else []
    if not families:
        raise _error(
            "bad_families", "no family to serve: configure a robot or serve.families (e.g. sim)"
        )
    lease_ms = table.integer("lease_ms", DEFAULT_LEASE_MS)
    if not 1 <= lease_ms <= MAX_LEASE_MS:
        raise _error("bad_lease", f"serve.lease_ms {lease_ms} is not 1..{MAX_LEASE_MS}")
    settle = table.number("settle_timeout_s", DEFAULT_SETTLE_TIMEOUT_S)
    if not 0 < settle <= 3600:
        raise _error("bad_settle_timeout", f"serve.settle_timeout_s {settle} is not in (0, 3600]")
    console = parse_console(table)
    live, live_origins = parse_live(table)
    grpc = parse_grpc(table.text("grpc", "off"))
    _check_apart(
        [
            ("sse", "bad_sse", sse),
            ("console", "bad_console", console.address),
            ("live", "bad_live", live),
            ("grpc", "bad_grpc", grpc),
        ]
    )
    catalog, world = _store_url(table, "catalog"), _store_url(table, "world")
    host_name = table.text("host_name", socket.gethostname())
    if (
        not host_name.strip()
        or host_name != host_name.strip()
        or not host_name.isprintable()
        or len(host_name.encode()) > 512
    ):
        raise _error(
            "bad_host_name",
            "serve.host_name must be a name of printable characters, without edge spaces, of"
            " at most 512 bytes (where hosts share"
            f" their stores on PostgreSQL: {SHARED_HOST_RULE})",
        )
    return ServeConfig(
        data_dir,
        workers,
        sse,
        tuple(families),
        lease_ms,
        settle,
        catalog,
        world,
        host_name,
        console,
        grpc,
        live,
        live_origins,
    )


def load_serve(path: str | os.PathLike[str], *, state_dir: Path, robots: int) -> ServeConfig:
    """The `[serve]` table of the host configuration at `path` (already validated otherwise)."""
    p = Path(path)
    raw = tomllib.loads(read_config_text(p))
    try:
        return parse_serve(raw.get("serve"), state_dir=state_dir, robots=robots, path=p)
    except HostConfigError as exc:
        raise in_file(exc, p) from None


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _naming_file(read: Callable[_P, _R]) -> Callable[_P, _R]:
    """`read` of a host configuration (its first argument), a refusal naming its file as
    `load_serve`'s does (`in_file`)."""

    @functools.wraps(read)
    def named(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return read(*args, **kwargs)
        except HostConfigError as exc:
            raise in_file(exc, Path(args[0].path)) from None  # type: ignore[attr-defined]

    return named


def _serve_table(config: Any) -> Table:
    try:
        raw = tomllib.loads(Path(config.path).read_text(encoding="utf-8")).get("serve")
    except (OSError, tomllib.TOMLDecodeError):
        raw = None
    return Table(raw if raw is not None else {}, "serve", SERVE_KEYS)


@_naming_file
def data_dir_for(config: Any) -> Path:
    """The Host data dir of a host configuration: `[serve] data_dir`, else `<state_dir>/moves`
    (what `tether move` and `tether operator` use with no daemon, and the daemon's default)."""
    given = _serve_table(config).path("data_dir", str(Path(config.state_dir) / "moves"))
    return config_relative(Path(config.path), given)


@_naming_file
def stores_named(config: Any) -> list[str]:
    """Which of `[serve] catalog` and `world` a host configuration names (in that order)."""
    table = _serve_table(config)
    return [k for k in ("catalog", "world") if k in table]


@_naming_file
def host_name_for(config: Any) -> str:
    """The host name a host configuration's moves are bound to: `[serve] host_name`, else the
    machine's hostname (the daemon's, and a standalone `tether move`'s on its data dir)."""
    return _serve_table(config).text("host_name", socket.gethostname())


@_naming_file
def catalog_url_for(config: Any) -> str | None:
    """The catalog URL of a host configuration (`[serve] catalog`), or None: the data dir's
    `catalog.db` (what `tether operator` reads with no daemon, as the daemon does)."""
    return _store_url(_serve_table(config), "catalog")


@_naming_file
def world_url_for(config: Any) -> str | None:
    """The world ledger URL of a host configuration (`[serve] world`), or None: the data
    dir's `world.db`."""
    return _store_url(_serve_table(config), "world")


__all__ = [
    "CODES",
    "DEFAULT_LIVE",
    "DEFAULT_SSE",
    "SERVE_KEYS",
    "ServeConfig",
    "catalog_url_for",
    "data_dir_for",
    "host_name_for",
    "stores_named",
    "world_url_for",
    "load_serve",
    "parse_grpc",
    "parse_serve",
]
