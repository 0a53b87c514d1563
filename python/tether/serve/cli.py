"""`tether serve --config host.toml`: run the robot-host daemon until SIGTERM or SIGINT."""

from __future__ import annotations

import atexit
import json
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from tether import _exit, _log
from tether._args import (
    STOP_SIGNALS,
    Parser,
    error_line,
    refuse_empty_urls,
    want_json,
    warn_url_secrets,
)
from tether._priority import quiet_heap, stop_priority
from tether._proc import abandon_shutdown, close_within, shutdown_bound_s, wait_for_signal
from tether.errors import TetherError
from tether.serve.daemon import Daemon
from tether.serve.status import listener_words, store_words

#: The codes `tether serve` documents (a test checks them against `tether._exit`).
EXIT_CODES = (
    _exit.OK,
    _exit.FAILED,
    _exit.USAGE,
    _exit.STORE_UNUSABLE,
    _exit.STORAGE_IO,
    _exit.UNAVAILABLE,
)
_EPILOG = """\
Owns the configured devices, runs the families' projector, observer and workers on the data
dir, serves the AG-UI stream and the live-event WebSocket (<live>/<world>; loopback unless
[tls]) and the control socket <state_dir>/serve.sock, which
`tether move`, `tether stop`, `tether operator`, `tether status` and tether.client use. On
SIGTERM or SIGINT every robot gets its safe-stop policy, then it exits 0. Prints one line when
ready (JSON off a TTY); logs go to stderr.

exit codes: 0 stopped on a signal; 1 a fatal error (safe-stopped first), workers or stores that
did not close within the shutdown bound of the safe stop (`shutdown_stalled`), a store's server
refused the login (`login_refused`), a schema the role may not use or create the stores in
(`schema_denied`), a catalog clock the role may not read (`clock_unavailable`); 2 usage or
configuration (an unknown [serve] key; a bad stream, console, gRPC or live setting: `bad_sse`,
`bad_console`, `bad_grpc`, `bad_live`; a stream, console, gRPC or live address off loopback
without [tls]: `insecure_listener`; the bridge's [remote]: `bad_remote`, `bad_remote_token`,
`insecure_remote`; a store URL: `bad_url`, `no_such_database`, `no_such_schema`, an empty one:
`bad_store_url`; the catalog and the world ledger in one SQLite file: `same_store_file`, one on
PostgreSQL and the other a file: `mixed_stores`; a host_name that cannot name this host's
worlds: `bad_host_name`); 5 a store that cannot be used (an older schema: `migration_needed`,
run `tether db upgrade`); 6 the disk refused a write; 7 another tether serve holds the state
dir, data dir, its host name on a shared catalog, SSE, console, gRPC or live port
(`daemon_running`, `host_name_taken`, `sse_unavailable`, `console_unavailable`,
`grpc_unavailable`, `live_unavailable`), a store's server cannot be reached (`unreachable`),
or a port is owned by another process (see `tether --help`)."""

log = logging.getLogger("tether.serve")


def ready_words(ready: dict[str, Any]) -> str:
    """The ready line on a terminal: this daemon's pid and host name, its control socket,
    every listener (or "off"), and each configured robot it could not connect."""
    words = (
        f"tether serve: pid {ready['pid']}, host {ready['host_name']}, control socket "
        f"{ready['socket']}; {store_words(ready)}; {listener_words(ready)}"
    )
    for robot, why in sorted(ready["unavailable"].items()):
        words += f"; robot {robot} unavailable ({why})"
    return words + "; serving until SIGTERM or Ctrl-C"


def main(argv: list[str]) -> int:
    parser = Parser(
        prog="tether serve",
        description="Run the robot-host daemon: devices, Activities, AG-UI stream, control socket.",
        epilog=_EPILOG,
    )
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument(
        "--catalog",
        metavar="URL",
        help="the Activity catalog (default: [serve] catalog, else sqlite:///DATA_DIR/catalog.db);"
        " postgresql://host/db is shared with other hosts (password from PGPASSWORD/PGPASSFILE)",
    )
    parser.add_argument(
        "--world",
        metavar="URL",
        help="the world ledger (default: [serve] world, else DATA_DIR/world.db); postgresql://...",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="the ready line as JSON (default: on off a TTY; on a TTY, words)",
    )
    _log.add_arguments(parser)
    # JSON off a terminal from the first refusal on: a usage error too is one document on
    # stdout, so a script never reads nothing.
    want_json("--json" in argv or not sys.stdout.isatty())
    args = parser.parse_args(argv)
    refuse_empty_urls(parser, catalog=args.catalog, world=args.world)  # as `bad_store_url`
    _log.setup(args.log_format, level=args.log_level)
    as_json = args.json or not sys.stdout.isatty()
    want_json(as_json)  # its refusals are JSON documents too
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    for sig in (*STOP_SIGNALS, signal.SIGINT):  # SIGHUP too: a closed ssh session
        signal.signal(sig, on_signal)
    try:
        daemon = Daemon.from_path(args.config, catalog_url=args.catalog, world_url=args.world)
    except TetherError as exc:
        error_line("tether serve", exc)
        return _exit.for_error(exc, default=_exit.USAGE)
    atexit.register(daemon.close)  # a fatal error or interpreter exit still safe-stops
    try:
        daemon.start()
        # Said once the stores opened (a refusal is one line, and the one that matters).
        warn_url_secrets("tether serve", log=log, catalog=args.catalog, world=args.world)
        # This process is the daemon: no full collection rescans its start-up heap (every
        # thread, a stop's too, waits for one). Not in `Daemon.start`: an embedding process
        # keeps its own collector settings.
        quiet_heap()
        with stop_priority():  # says so at start-up, once, if stops cannot be raised here
            pass
        ready = {
            "ready": True,
            "pid": daemon.ping({})["pid"],
            "socket": daemon.socket_path,
            "sse": daemon.sse_url,
            "console": None if daemon.console is None else daemon.console.url,
            "grpc": daemon.grpc_url,
            "live": None if daemon.live is None else daemon.live.url,
            "data_dir": str(daemon.data_dir),
            **daemon.stores(),
            "host_name": daemon.serve.host_name,
            "unavailable": daemon.unavailable,
        }
        if as_json:
            print(json.dumps(ready), flush=True)
        else:
            print(ready_words(ready), flush=True)
        wait_for_signal(done, also=lambda: daemon.lost_host_name is not None)
        if daemon.lost_host_name is not None:
            error_line("tether serve", daemon.lost_host_name)
            return _exit.for_error(daemon.lost_host_name)  # `finally` safe-stops and closes
        log.info("stopping on a signal")
    except TetherError as exc:
        error_line("tether serve", exc)
        code = _exit.for_error(exc, default=_exit.FAILED)
        unavailable = (
            "sse_unavailable",
            "console_unavailable",
            "grpc_unavailable",
            "live_unavailable",
        )
        return _exit.UNAVAILABLE if getattr(exc, "code", None) in unavailable else code
    except OSError as exc:  # a full or read-only disk, say: said as what it is (exit 6)
        error_line("tether serve", exc)
        return _exit.for_error(exc, default=_exit.FAILED)
    except Exception:
        log.exception("fatal error: safe-stopping every device")
        raise
    finally:
        bound = shutdown_bound_s()
        if not close_within(daemon.close, bound, first=daemon.safe_stopped):
            abandon_shutdown("tether serve", bound)
    return _exit.OK
