"""`tether serve`: the one long-running process of a robot host.

It owns the configured devices (one `DeviceHost`, every robot connected at start), runs the
runtime `Host` (projector, observer, workers) of the configured families on the data dir,
serves the AG-UI stream (bounded `RunStream`, loopback only) and one control socket,
`<state_dir>/serve.sock`.

Rules:
- Single instance: `<state_dir>/serve.lock` then `<data_dir>/serve.lock` (`tether.serve.locks`)
  are taken before anything else; a second daemon is `daemon_running`, naming the pid. The
  control socket is bound only under the state dir's lock, replacing one a dead daemon left.
- Every port lock the device host takes names `serve.sock`, so `tether stop` (which asks each
  port's owner) reaches the daemon. The socket serves from before the robots are connected: a
  stop during start-up latches the robot.
- A robot that cannot be connected at start is logged and listed by `status` as unavailable
  with its error; the others are served. A move for it connects it on first use (or fails as
  the standalone move would), a stop for it latches it, and the device watch
  (`refresh_devices`, every `DEVICE_POLL_S`) connects it once it answers. A port whose adapter
  went away is closed and opened anew the same way once its device node is back.
- The stop path (`stop`, a priority lane of the control channel) writes the robot's durable
  latch file and sends the stop frames; it touches no catalog, world or artifact store and
  waits on no lock of theirs.
- Credentials sent with `operator_resolve`, `operator_resume`, `operator_reboot` are verified
  here, against this daemon's own host.toml (rate-limited); the clients never verify one.
- Session heartbeats (`tether.serve.sessions`, the gRPC `Heartbeat`) live in memory: the
  families get them through `ServeContext.sessions`, and their watchdog stops a lapsed
  session's moving robots through `stop_devices` (the stop path above). A restart forgets them.
- Shutdown (SIGTERM, SIGINT, a fatal error, interpreter exit): under the stop latch's lock, so
  no move frame can slip in between, every connected robot gets its stop policy (a latched one
  is only read back) and the ports are released; then the workers, the stream and the stores
  close, then the locks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tether._args import error_fields
from tether._coded import CodedError
from tether._config import clipped
from tether._crash import crash_point
from tether._dirs import usable_dir
from tether._listen import ListenerError, address_text
from tether._priority import stop_priority
from tether.activities import ActivityKey, ActivityRecord
from tether.agui import LiveActivities, RunStream, StoreState, StreamServer
from tether.devices.config import HostConfig, config_digest, load_config
from tether.devices.control import daemon_socket
from tether.devices.host import DeviceHost
from tether.devices.latch import OPERATOR_STOP, SESSION_LAPSE
from tether.errors import TetherError
from tether.operator import decisions
from tether.runtime import Family, Host, ProgressEvent
from tether.runtime._errors import bad_families, check_owned
from tether.runtime._family import families_by_kind
from tether.runtime.worker_main import live_families, result_summary
from tether.serve import views
from tether.serve.config import ROBOT_MOVE, ServeConfig, load_serve
from tether.serve.families import ServeContext, Served, load, load_items
from tether.serve.live_mount import LiveMount
from tether.serve.locks import InstanceLock
from tether.serve.sessions import Sessions
from tether.storage._errors import MixedStores
from tether.storage._host_claim import HostClaim, HostNameTaken, is_shared
from tether.storage._urls import (
    SHARED_HOST_NAME,
    SHARED_HOST_RULE,
    check_one_backend,
    check_separate_files,
    postgres_url,
    redact,
    sqlite_url,
    unsupported_url,
)
from tether.transport import PortBusy
from tether.world import ComponentWrite, WorldNotFound

log = logging.getLogger("tether.serve")
#: At most this many unsettled Activities are put on a fresh run stream at start (the most
#: recently admitted; `Daemon._restore_live`).
LIVE_RESTORE_MAX = 256

#: How long one `watch` request waits at most (the client asks again).
MAX_WATCH_S = 20.0
#: Latest progress kept for this many Activities (oldest forgotten first).
PROGRESS_KEYS = 4096
#: The daemon's own crash points (`TETHER_CRASH_AT`): `serve.after_submit` is after a submit's
#: intent tick is committed and before the client has its answer (a lost reply: the client
#: sends the identical submit again and gets the same Activity). The runtime's, the
#: adapters' and the resolve path's points fire inside the daemon too.
#: `serve.before_submit_tick` is inside a group commit, after its batch is collected and
#: decided and before its tick is committed (nobody of the batch has an answer).
CRASH_POINTS = ("serve.before_submit_tick", "serve.after_submit")
#: Work that waits for running stops (`StopFirst.wait_clear`) waits at most this long.
STOP_FIRST_MAX_WAIT_S = 1.0
#: How often the daemon looks for robots to reconnect (`Daemon.refresh_devices`): a port whose
#: adapter went away, or a robot not connected at start, is opened again once it answers.
DEVICE_POLL_S = 1.0
#: How long a start waits for a command of its own state dir to let go of a port it holds
#: (`port_owned`: a standalone `tether stop` holds it for a moment) before it refuses to start
#: beside a process that keeps it (a `tether worker`, a standalone `tether move`).
PORT_OWNED_WAIT_S = 5.0
#: How long a closing daemon waits for the device watch's connect in flight (a port's open
#: and its devices' PINGs are bounded by the port's timeouts).
WATCH_JOIN_S = 10.0
#: At most this many submits of one world are committed in one tick (`Daemon.submit`).
SUBMIT_BATCH = 256
#: How long `status` waits for the stores' part of its answer (the Activity counts, the parked
#: decisions): a database that hangs (rather than refusing) leaves the devices shown, with
#: `stores_error` saying the stores did not answer, within `tether status`'s own wait.
STATUS_STORES_S = 5.0


class _StoresRead:
    """One read of the stores' part of a status, on a thread of its own (a daemon thread: a
    read a hung database holds never keeps the process from exiting). While one is unfinished
    no other starts, so statuses asked during an outage do not pile threads up."""

    def __init__(self, read: Any) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(read,), name="status-stores", daemon=True).start()

    def _run(self, read: Any) -> None:
        try:
            self.value = read()
        except BaseException as exc:  # handed to the status that waits for it
            self.error = exc
        finally:
            self.done.set()


#: The interpreter's thread switch interval while a daemon runs (`sys.setswitchinterval`; the
#: default is 5 ms). A thread woken by a lock, its socket or the bus waits for the running
#: thread to give up the interpreter, up to this long; a shorter interval makes every busy
#: thread hand it over more often, and under a flood the hand-offs themselves delay a stop:
#: `benches/grpc_control.py` part 2 measured loaded Stop p99 25 to 38 ms at 2 ms, against 33
#: to 50 ms at 0.5 ms and worse at 0.1 ms, with idle stops unchanged.
SWITCH_INTERVAL_S = 0.002


def _check_free(host: str, port: int) -> None:
    """Refuse a gRPC address another listener holds (`grpc_unavailable`) now, before the
    robots are connected: the server itself is bound only once the runtime runs. Port 0 (any
    free one) is always free. Bound as the server binds it (SO_REUSEADDR, no SO_REUSEPORT),
    then released at once."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return  # anything else is the server's own to report when it binds
        raise unavailable(
            "grpc_unavailable", "gRPC", address_text(host, port), "address in use"
        ) from None
    finally:
        probe.close()


class ServeRefusal(CodedError):
    """The daemon refused a request (`admission_conflict`, `bad_request`, `not_submittable`,
    `unknown_activity`, `sse_unavailable`, `daemon_starting`)."""


def unavailable(code: str, what: str, address: str, cause: object) -> ServeRefusal:
    """The refusal of a listener that cannot be bound (``code``: `sse_unavailable`,
    `console_unavailable`, `grpc_unavailable`; exit 7): what it serves, where, and why."""
    return ServeRefusal(
        code, f"cannot serve {what} on {address}: {cause}", details={"address": address}
    )


@dataclasses.dataclass(eq=False)
class _Submit:
    """One caller's submit waiting in its world's group commit: set `done` (with `created` or
    `error`) only after its batch's tick is committed or has failed."""

    key: ActivityKey
    write: ComponentWrite
    #: Components that must not be on the write's entity (another family's intent there is
    #: another operation under the same id).
    exclusive: frozenset[str] = frozenset()
    #: Catalog keys that must hold no record (another kind's Activity under the same id).
    unrecorded: tuple[ActivityKey, ...] = ()
    wake: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: bool = False
    created: bool = False
    error: BaseException | None = None
    #: The catalog record its tick's projection admitted (None: not created by this submit,
    #: or not admitted by that tick's post-commit work, e.g. after a lost COMMIT reply).
    record: ActivityRecord | None = None

    def answer(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.created


#: Every `.code` a daemon refusal carries besides the catalog's, the operator's and the
#: configuration's.
CODES = (
    "admission_conflict",
    "bad_request",
    "bad_url",
    "console_unavailable",
    "daemon_running",
    "daemon_starting",
    "grpc_unavailable",
    "live_off",
    "mixed_stores",
    "not_submittable",
    "sse_unavailable",
    "unknown_activity",
)


def state_lock_path(state_dir: Path) -> Path:
    return state_dir / "serve.lock"


def data_lock_path(data_dir: Path) -> Path:
    return data_dir / "serve.lock"


#: The daemon's control socket for a state dir (a short stand-in for a long path).
serve_socket = daemon_socket


def _text(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str) or not value:
        raise ServeRefusal("bad_request", f"`{name}` must be a non-empty string")
    return value


def _key(request: dict[str, Any]) -> ActivityKey:
    text = _text(request, "key")
    parts = text.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise ServeRefusal("bad_request", f"{text!r} is not world/kind/activity")
    return ActivityKey(*parts)


class StopFirst:
    """Stops go first: while a stop runs (`stopping`), work that would compete with it for the
    interpreter and the disk (a group commit's tick, an RPC entering the gRPC work lane) waits
    at its next entry (`wait_clear`, at most `STOP_FIRST_MAX_WAIT_S`), so a stop is never
    queued behind a flood. Work already running goes on. Shareable across threads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stops = 0
        #: How many entries waited for a stop (for tests).
        self.waited = 0

    @contextlib.contextmanager
    def stopping(self) -> Iterator[None]:
        with self._cond:
            self._stops += 1
        try:
            yield
        finally:
            with self._cond:
                self._stops -= 1
                if not self._stops:
                    self._cond.notify_all()

    def wait_clear(self, timeout_s: float = STOP_FIRST_MAX_WAIT_S) -> None:
        """Return once no stop runs (or after `timeout_s`)."""
        if not self._stops:  # the common case: no lock taken
            return
        with self._cond:
            if self._stops:
                self.waited += 1
                self._cond.wait_for(lambda: not self._stops, timeout_s)


class Daemon:
    """One `tether serve` (see the module rules). `start()`, then `close()` (always)."""

    def __init__(
        self,
        config: HostConfig[Any],
        serve: ServeConfig,
        *,
        robots: list[str] | None = None,
        factories: Sequence[Callable[[ServeContext], Sequence[Any]]] = (),
        progress_listener: Callable[[ProgressEvent], None] | None = None,
        stream_url: str | None = None,
    ) -> None:
        """`factories`: in-process family factories served beside `serve.families` (an app
        that embeds the daemon, e.g. `tether demo`); `progress_listener`: also told every
        progress event (after the daemon's own bookkeeping); `stream_url`: the AG-UI stream
        such an app serves itself (its `[serve] sse` off), said by `tether status` and the
        daemon's record as the daemon's own is."""
        self.config = config
        self._factories = tuple(factories)
        self._progress_listener = progress_listener
        self.serve = serve
        #: On a world ledger shared by hosts, the host whose worlds this daemon writes (named
        #: `<id>@<host_name>`, `tether.runtime.owned_by`); None: every world of its own ledger.
        self.world_owner: str | None = (
            serve.host_name if serve.host_name and is_shared(serve.world_url) else None
        )
        self.robots = robots if robots is not None else sorted(config.robots)
        self.state_dir = config.state_dir
        self.data_dir = serve.data_dir
        self.socket_path = serve_socket(self.state_dir)
        self.unavailable: dict[str, str] = {}
        #: Robots another process of this state dir drives (`port_owned`: a `tether worker`
        #: beside a daemon that answers operators only), whose moves that process runs.
        self.driven_elsewhere: set[str] = set()
        self._devices_done = threading.Event()
        self._watcher: threading.Thread | None = None
        self.started_at_ms = int(time.time() * 1000)
        #: The host file's digest as this daemon read it (`config_digest`): a command that
        #: finds the file changed since says its move runs with what the daemon loaded.
        self.config_digest = config_digest(config.path)
        self.devices: DeviceHost | None = None
        self.runtime: Host | None = None
        self.stream: RunStream | None = None
        self.server: StreamServer | None = None
        self.sse_url: str | None = stream_url
        self.console: Any = None  # the operator console (tether.console), when configured
        self.live: LiveMount | None = None  # the live-event WebSocket (`live_mount`)
        self._locks: list[InstanceLock] = []
        #: The families this daemon serves, by kind (read-only for the console and gRPC).
        self.served: dict[str, Served] = {}
        self._closers: list[Any] = []
        #: Why the daemon must stop on its own: another daemon took its host name
        #: (`tether serve` watches it beside its signals), else None.
        self.lost_host_name: HostNameTaken | None = None
        self._submit_lock = threading.Lock()  # guards the group commit's queues
        self._pending: dict[str, list[_Submit]] = {}  # per world: submits not yet taken
        self._committing: set[str] = set()  # worlds whose batch a caller is committing
        self._changed = threading.Condition()
        #: Told the key of every progress event (after `_changed` is notified): the gRPC
        #: server wakes that operation's watches only.
        self.progress_watchers: list[Callable[[ActivityKey], None]] = []
        #: Stops go first (see `StopFirst`): `stop_devices` runs under it.
        self.stop_first = StopFirst()
        self._seq = 0
        self._progress: OrderedDict[ActivityKey, tuple[int, dict[str, Any]]] = OrderedDict()
        self._stores_read: _StoresRead | None = None
        self._stores_lock = threading.Lock()
        self._closed = False
        #: Set once `close` safe-stopped every device (or found none), before it waits for the
        #: workers, streams and stores (`tether serve` bounds that wait: `close_within`).
        self.safe_stopped = threading.Event()
        self.grpc: Any = None  # the RobotControl server (`[serve] grpc`, tether.serve.grpc_server)
        #: Session heartbeats (`tether.serve.sessions`), in memory; watched from `start()`.
        self.sessions = Sessions(
            lambda robot: self.stop_devices({"robot": robot}, by=SESSION_LAPSE)
        )
        self.grpc_url: str | None = None

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        catalog_url: str | None = None,
        world_url: str | None = None,
    ) -> Daemon:
        """The daemon of a host.toml; `catalog_url`/`world_url` (the `--catalog`/`--world`
        flags) override its `[serve]` keys."""
        config: HostConfig[Any] = load_config(path)
        serve = load_serve(path, state_dir=config.state_dir, robots=len(config.robots))
        serve = dataclasses.replace(
            serve,
            catalog_url=catalog_url or serve.catalog_url,
            world_url=world_url or serve.world_url,
        )
        return cls(config, serve)

    # --- start ---

    def stores(self) -> dict[str, str]:
        """Where the catalog and the world ledger are, as a person may be shown them: a
        PostgreSQL URL without its passwords (`redact`), else the data dir's file."""
        data = self.data_dir.absolute()
        return {
            "catalog": redact(self.serve.catalog_url) if self.serve.catalog_url
            else str(data / "catalog.db"),
            "world": redact(self.serve.world_url) if self.serve.world_url
            else str(data / "world.db"),
        }  # fmt: skip

    def _store_places(self) -> dict[str, str]:
        """`stores` as the log names them: a server's host, port and database (as its errors
        name it), never a URL, even one with its passwords masked."""
        from tether.storage._pg import where

        places = self.stores()
        for what, url in (("catalog", self.serve.catalog_url), ("world", self.serve.world_url)):
            if url:
                places[what] = f"PostgreSQL at {where(url)}"
        return places

    def _record(self) -> dict[str, Any]:
        return {
            "socket": self.socket_path,
            "state_dir": str(self.state_dir),
            "data_dir": str(self.data_dir),
            **self.stores(),
            "sse": self.sse_url,
            "console": None if self.console is None else self.console.url,
            "grpc": self.grpc_url,
            "live": None if self.live is None else self.live.url,
            "config": str(Path(self.config.path).absolute()),
            "config_digest": self.config_digest,
            "started_at_ms": self.started_at_ms,
        }

    def _world_fenced(self, world_id: str, why: Exception) -> None:
        """A world of this host's name has a newer writer: another tether serve took the name
        while this one's claim was down (its connection cut), wrote the world, and this one
        took the name back after it. This daemon can write none of its worlds any more, and
        would stay up refusing every submit (`stale_writer`), so it stops as one that lost
        its name does; started again, it takes its worlds back. On a ledger of its own (no
        shared host name) nothing else writes its worlds: the error is the call's only."""
        if self.world_owner is None:
            return
        self._host_name_lost(
            HostNameTaken(
                "host_name_taken",
                f"world {world_id!r} of host name {self.serve.host_name!r} has a newer writer"
                f" ({why}): another tether serve wrote it while this daemon's connection was"
                " down; this daemon stops (started again, it takes its worlds back)",
                details={"host_name": self.serve.host_name, "world": world_id},
            )
        )

    def _host_name_lost(self, why: HostNameTaken) -> None:
        """Another daemon took this host's name while its claim's connection was down: this
        one must stop claiming the name's device work, so it stops (`tether serve` sees
        `lost_host_name`, closes it, safe-stopping every device, and exits 7)."""
        self.lost_host_name = why

    def _check_stores(self) -> None:
        """Open and close each store once, before the control socket and the listeners: an
        older schema (`migration_needed`), a server that cannot be reached or refuses the
        login is one line, and nothing was served (a fresh store is created here, as the
        runtime would)."""
        from tether.activities import Catalog
        from tether.world import open_ledger

        data = self.data_dir.absolute()
        Catalog.open(self.serve.catalog_url or sqlite_url(data / "catalog.db")).close()
        open_ledger(self.serve.world_url or sqlite_url(data / "world.db")).close()

    def _check_shared_together(self) -> None:
        """Refuse a catalog on PostgreSQL with a world ledger in the data dir, or the other way
        round (`mixed_stores`, a usage error, before anything is opened; see
        `tether.storage._urls.check_one_backend`), and, on a world ledger hosts share, a host
        name that cannot name this host's worlds (`<id>@<host_name>`: `bad_host_name`)."""
        for what, url in (("catalog", self.serve.catalog_url), ("world", self.serve.world_url)):
            why = unsupported_url(what, url)
            if why is not None:  # a typo in the scheme is no file of this host
                raise ServeRefusal("bad_url", why, details={"store": what})
        try:
            check_one_backend(self.serve.catalog_url, self.serve.world_url)
        except MixedStores as e:
            raise ServeRefusal(e.code, e.message, details=dict(e.details)) from None
        name = self.serve.host_name
        if self.world_owner is not None and not SHARED_HOST_NAME.fullmatch(name):
            raise ServeRefusal(
                "bad_host_name",
                f"serve.host_name {clipped(name)!r} names this host's worlds on a world ledger"
                f" hosts share (<id>@<host_name>): {SHARED_HOST_RULE}",
                details={"host_name": clipped(name)},
            )

    def _check_listeners(self) -> None:
        """Each configured listener's address under the listener policy (loopback unless
        [tls]; its TLS files usable), before anything is opened, locked or logged: an
        address the policy refuses is one line (`insecure_listener`, exit 2), not a daemon
        that took its locks and its control socket first."""
        from tether._listen import ListenerPolicy

        auth = self.config.authenticator()
        console = self.serve.console.address
        for address in (self.serve.sse, console, self.serve.live):
            if address is not None:
                ListenerPolicy(address, self.config.tls, auth)
        if self.serve.grpc is not None:
            from tether.serve.grpc_server import listener_policy

            listener_policy(self.config, self.serve.grpc)
            _check_free(*self.serve.grpc)  # it is bound last: a taken port, before any robot

    def _check_families(self) -> None:
        """Each served factory's module's own `check_config(path)`, where it has one (the
        bridge's reads its `[remote]` host whole), before anything is opened, locked or
        written: a mistake there is the configuration error it is (exit 2), never found after
        the daemon took its state dir (or refused as `daemon_running` where another holds it).
        A module that cannot be imported is left to the families' load, which says so."""
        import importlib

        for spec in self.serve.families:
            try:
                module = importlib.import_module(spec.partition(":")[0])
            except ImportError:
                continue
            check = getattr(module, "check_config", None)
            if callable(check):
                check(self.config.path)

    def start(self) -> Daemon:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._check_listeners()  # refused before anything is opened
        self._check_families()
        data = self.data_dir.absolute()
        check_separate_files(  # one SQLite file for both stores: `same_store_file`, exit 2
            self.serve.catalog_url or sqlite_url(data / "catalog.db"),
            self.serve.world_url or sqlite_url(data / "world.db"),
        )
        self._check_shared_together()
        usable_dir(self.state_dir, what="host.state_dir")
        usable_dir(self.data_dir, what="serve.data_dir")
        for path, what in (
            (state_lock_path(self.state_dir), "state dir"),
            (data_lock_path(self.data_dir), "data dir"),
        ):
            lock = InstanceLock(path, what)
            lock.acquire(self._record())
            self._locks.append(lock)
        if self.serve.host_name and is_shared(self.serve.catalog_url):
            # One daemon per host name on a shared catalog: it claims the device work bound
            # to the name (`host_name_taken` otherwise, before any device or work is touched).
            claim = HostClaim.take(
                str(postgres_url(self.serve.catalog_url)),
                self.serve.host_name,
                on_lost=self._host_name_lost,
            )
            self._closers.append(claim.close)  # after the workers stop (`close`)
        self._check_stores()
        self.devices = DeviceHost(self.config, socket_path=self.socket_path)
        for op, handler in self._handlers().items():
            self.devices.add_handler(op, handler)
        self.devices.serve_control()  # a stop is answered from now on
        log.info("control socket", extra={"socket": self.socket_path, "pid": os.getpid()})
        if self.serve.sse is not None:
            host, port = self.serve.sse
            self.stream = RunStream("tether-serve", f"run-{uuid.uuid4().hex[:12]}", StoreState())
            try:
                self.server = StreamServer(
                    self.stream,
                    host,
                    port,
                    tls=self.config.tls,
                    authenticator=self.config.authenticator(),
                )
            except ListenerError:
                raise  # the policy refused it (insecure_listener, a TLS key, ...): usage
            except OSError as exc:
                raise unavailable(
                    "sse_unavailable", "the AG-UI stream", f"{host}:{port}", exc.strerror or exc
                ) from None
            self.stream.start()
            self.sse_url = self.server.url
        if self.serve.console.address is not None:
            self._mount_console()
        if self.serve.live is not None:  # the listener policy first: insecure_listener, exit 2
            self.live = LiveMount(
                self.config,
                self.serve.live,
                (*self.serve.live_origins, *self._console_origins()),
                self.data_dir,
                lambda: self.runtime,
                self.served_families,
            )
            if self.console is not None:  # a console login is a credential there too
                self.live.session_check = self._console_session
        ctx = ServeContext(
            self.config,
            self.devices,
            self.data_dir,
            self.serve.settle_timeout_s,
            self._closers,
            host_name=self.serve.host_name,
            sessions=self.sessions.start(),
            shared_world=is_shared(self.serve.world_url),
        )
        served: list[Served] = []
        for spec in self.serve.families:
            served += load(spec, ctx)
        for factory in self._factories:
            served += load_items(factory(ctx), repr(factory))
        families: list[Family] = [s.family for s in served]
        for s in served:
            for kind in s.family.kinds:
                if kind in self.served:  # two factories serving one kind: a configuration error
                    raise bad_families(
                        f"serve.families: kind {kind!r} is served by family"
                        f" {self.served[kind].family.name} and by family {s.family.name}: serve"
                        " each kind once"
                    )
                self.served[kind] = s
        self._live = LiveActivities(self.stream) if self.stream is not None else None
        if self._live is not None:
            families = live_families(families, self._live)
        self.runtime = Host(
            self.data_dir,
            families,
            world_owner=self.world_owner,
            workers=self.serve.workers,
            lease_ms=self.serve.lease_ms,
            progress_listener=self._on_progress,
            catalog_url=self.serve.catalog_url,
            world_url=self.serve.world_url,
            host_name=self.serve.host_name or None,  # none: unbound work only
            pause=self.stop_first.wait_clear,  # background work waits while a stop runs
            on_fenced=self._world_fenced,
        )
        if self._live is not None:  # the stream shows an Activity settled once it is
            self.runtime.settler.listeners.append(self._on_settled)
        # The robots last: every refusal of the configuration, the listeners and the stores
        # above comes before a port is opened, so a daemon that cannot start sends no frame
        # (no connect, no safe-stop at its close). A stop meanwhile latches through the
        # control socket, connecting the robot for it.
        for name in self.robots:
            if not self._connect(name, at_start=True):
                log.warning(
                    "robot unavailable", extra={"robot": name, "error": self.unavailable[name]}
                )
        if self.robots:
            self._watcher = threading.Thread(
                target=self._watch_devices, name="tether-devices", daemon=True
            )
            self._watcher.start()
        if self._live is not None:
            self._restore_live(families)
        self.runtime.start()
        if self.serve.grpc is not None:
            from tether.serve.grpc_server import mount

            self.grpc = mount(self, self.serve.grpc)
            self.grpc_url = self.grpc.url
        for lock in self._locks:
            lock.write(self._record())
        log.info(
            "serving",
            extra={
                "data_dir": str(self.data_dir),
                **self._store_places(),
                "sse": self.sse_url,
                "families": [f.name for f in families],
                "workers": self.serve.workers,
                "unavailable": sorted(self.unavailable),
            },
        )
        return self

    def close(self) -> list[dict[str, Any]]:
        """Safe-stop every device, then stop the workers, the stream and the stores; release
        the locks. Idempotent; returns the stop reports."""
        if self._closed:
            return []
        self._closed = True
        reports: list[dict[str, Any]] = []
        self._devices_done.set()  # no reconnect races the shutdown's release of the ports
        if self._watcher is not None:
            self._watcher.join(timeout=WATCH_JOIN_S)  # a connect in flight ends first
        try:
            if self.grpc is not None:
                self.grpc.close()
            self.sessions.close()  # no lapse stop races the shutdown's own
            if self.devices is not None:
                # Under the latch's lock: no move frame between a robot's stop and its port's
                # release (a move's next frame then fails on the closed bus).
                with self.devices.latch.lock:
                    reports = [r.as_dict() for r in self.devices.close()]
                for report in reports:
                    log.info("safe stop", extra={"report": report})
        finally:
            self.safe_stopped.set()
            try:
                if self.live is not None:
                    self.live.shutdown()
                if self.runtime is not None:
                    self.runtime.close()
                for close in reversed(self._closers):
                    try:
                        close()
                    except Exception:
                        log.exception("a family's close failed")
                if self.console is not None:
                    self.console.close()
                if self.stream is not None:
                    self.stream.finish()
                if self.server is not None:
                    self.server.close()
            finally:
                for lock in reversed(self._locks):
                    lock.release()
                self._locks.clear()
        return reports

    def _mount_console(self) -> None:
        """The operator console (`[serve] console`): its page shows the AG-UI run, so the run
        stream exists with it even when `sse` is off."""
        from tether.console.server import Console

        if self.stream is None:
            self.stream = RunStream("tether-serve", f"run-{uuid.uuid4().hex[:12]}", StoreState())
            self.stream.start()
        try:
            self.console = Console(self, self.serve.console, tls=self.config.tls)
        except ListenerError:
            raise
        except OSError as exc:
            host, port = self.serve.console.address or ("", 0)
            raise unavailable(
                "console_unavailable",
                "the operator console",
                f"{host}:{port}",
                exc.strerror or exc,
            ) from None
        log.info("operator console", extra={"url": self.console.url})

    def _console_origins(self) -> tuple[str, ...]:
        """The Origins of this daemon's own console page (its address, and `localhost` for a
        loopback one), accepted by the live endpoint beside `live_origins`: a logged-in
        operator's page reads the stream with its cookie from there. Its port is often chosen
        at start (`console = "127.0.0.1:0"`), so it could not be listed in the file."""
        if self.console is None:
            return ()
        from urllib.parse import urlsplit

        url = urlsplit(str(self.console.url))
        port = f":{url.port}" if url.port else ""
        host = url.hostname or ""
        names = [f"[{host}]" if ":" in host else host]
        if host in ("127.0.0.1", "::1"):
            names.append("localhost")
        return tuple(f"{url.scheme}://{name}{port}" for name in names)

    def _console_session(self, cookies: Any) -> str | None:
        """The operator of a live console session named by `cookies` (None: none)."""
        from tether.console.sessions import COOKIE

        if self.console is None:
            return None
        session = self.console.sessions.get(cookies.get(COOKIE))
        return None if session is None else str(session.operator)

    # --- progress ---

    def _on_progress(self, event: ProgressEvent) -> None:
        if self.live is not None:
            self.live.note(event.key)
        if self._live is not None:
            try:
                self._live.progress(event)
            except Exception:  # the live stream never fails an attempt
                log.exception("live progress failed")
        with self._changed:
            self._seq += 1
            self._progress[event.key] = (self._seq, dict(event.content))
            self._progress.move_to_end(event.key)
            while len(self._progress) > PROGRESS_KEYS:
                self._progress.popitem(last=False)
            self._changed.notify_all()
        for watcher in self.progress_watchers:
            watcher(event.key)
        if self._progress_listener is not None:
            self._progress_listener(event)

    def _on_settled(self, records: list[ActivityRecord]) -> None:
        """Each settled Activity's final state on the live stream (and so the console):
        `settled`, with its result's digest and whether it failed."""
        live = self._live
        if live is None:
            return
        for record in records:
            changes: dict[str, Any] = {"state": "settled", "attempt": record.attempt_count}
            if record.result is not None:
                changes["result"] = result_summary(record.result)
            live.conclude(record.key, changes)

    def _restore_live(self, families: list[Family]) -> None:
        """The run stream (and so the console) starts with every unsettled Activity as its
        record says it, before any worker runs: after a restart it showed none until each
        one's attempt reported again (a parked move's, a minute later). At most
        `LIVE_RESTORE_MAX`, the most recently admitted; a store that cannot be read leaves
        the stream to the attempts' reports."""
        assert self._live is not None and self.runtime is not None
        runtime = self.runtime
        try:
            records = list(views.unsettled(runtime, families))
        except TetherError as exc:
            log.warning("live stream: the unsettled Activities could not be read: %s", exc)
            return
        records.sort(key=lambda r: r.admitted_at_ms)
        for record in records[-LIVE_RESTORE_MAX:]:
            try:
                self._live.reset(record.key, **views.restored(record, runtime.artifacts))
            except Exception:  # the live stream never stops the daemon
                log.exception("live stream: %s could not be restored", record.key)

    def latest(self, key: ActivityKey) -> tuple[int, dict[str, Any] | None]:
        """An Activity's latest progress report: (its sequence number, its content), (0, None)
        before the first."""
        with self._changed:
            seq, content = self._progress.get(key, (0, None))
            return seq, content

    # --- control requests ---

    def _handlers(self) -> dict[str, Any]:
        return {
            "stop": self.stop_devices,
            "resume": self._on_resume,
            "reboot": self._on_reboot,
            "ping": self.ping,
            "submit": self._on_submit,
            "get": self._on_get,
            "watch": self._on_watch,
            "status": self._on_status,
            "operator_list": self._on_operator_list,
            "operator_show": self._on_operator_show,
            "operator_resolve": self._on_operator_resolve,
            "operator_resume": self._on_resume,
            "operator_reboot": self._on_reboot,
            "live_canonical": self._on_live_canonical,
        }

    def host(self) -> Host:
        """The running Activity host (`daemon_starting` until it runs)."""
        if self.runtime is None:
            raise ServeRefusal("daemon_starting", "the daemon is still starting; ask again")
        return self.runtime

    def ping(self, request: dict[str, Any]) -> dict[str, Any]:
        """The control socket's `ping`: this process's id and the daemon's record."""
        return {"pid": os.getpid(), **self._record()}

    def refresh_devices(self, *, reconnect: bool = False) -> None:
        """Disconnect the robots whose port's adapter went away (`DeviceHost.forget_lost`):
        `status` lists them unavailable, health reports them not serving, and their next use
        opens the port anew. With ``reconnect``, also connect each robot not connected now
        (a replugged adapter, a device node back, one unavailable since start): a connect only
        reads (it checks the devices answer as configured), so the robot's latch and its
        parked moves stay as they are."""
        devices = self.devices
        if devices is None or self._closed:
            return
        for name in devices.forget_lost():
            self.unavailable[name] = "PortLost: its adapter went away; reconnecting"
            log.warning("robot port lost", extra={"robot": name})
        if not reconnect:
            return
        for name in self.robots:
            if name not in devices.identities and not self._devices_done.is_set():
                self._connect(name)  # a robot still away: recorded, not logged every second

    def _connect(self, name: str, *, at_start: bool = False) -> bool:
        """Connect a robot (`DeviceHost.connect`: a connect only reads); whether it answered.
        One that did not is listed `unavailable` with its error. At start, a port another
        process opened exclusively (`port_busy`: another daemon, on another state dir, drives
        this robot) refuses the start (exit 7) rather than wait to take the robot over when
        that one exits, with a latch of its own: the robots connected so far are released
        unstopped (they were only read), so the refusal sends no frame. A command of this
        state dir holding it (`port_owned`) is waited for, `PORT_OWNED_WAIT_S` at most (a
        standalone `tether stop` lets go at once); one that keeps it (a `tether worker`, a
        standalone `tether move`: a second controller of the robot on the same catalog)
        refuses the start the same way, naming its pid, when this daemon's workers would run
        moves (the robot_move family served, workers > 0). A daemon that runs none (one that
        only answers operators beside such a worker) serves the robot unavailable."""
        assert self.devices is not None
        drives = self.serve.workers > 0 and ROBOT_MOVE in self.serve.families
        deadline = time.monotonic() + (PORT_OWNED_WAIT_S if drives else 0.0)
        while True:
            try:
                identity = self.devices.connect(name)
                break
            except (TetherError, OSError) as exc:
                if at_start and isinstance(exc, PortBusy):
                    if exc.code == "port_owned" and time.monotonic() < deadline:
                        time.sleep(0.1)
                        continue
                    if exc.code == "port_busy" or drives:
                        self.devices.release_ports()
                        if exc.code == "port_owned":
                            raise PortBusy(
                                "port_owned",
                                f"robot {name}: {exc.message}; another Tether process of this"
                                " state dir drives it (a tether worker or a standalone tether"
                                " move): stop it, then start tether serve",
                                details=exc.details,
                            ) from None
                        raise
                self.unavailable[name] = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, PortBusy) and exc.code == "port_owned":
                    self.driven_elsewhere.add(name)  # a tether worker's robot: it runs them
                else:
                    self.driven_elsewhere.discard(name)
                return False
        self.unavailable.pop(name, None)
        self.driven_elsewhere.discard(name)
        log.info("robot connected", extra={"robot": name, "identity": identity.as_dict()})
        return True

    def _watch_devices(self) -> None:
        while not self._devices_done.wait(DEVICE_POLL_S):
            try:
                self.refresh_devices(reconnect=True)
            except Exception:  # the watch never takes the daemon down
                log.exception("device watch failed")

    def stop_devices(
        self, request: dict[str, Any], *, by: str = OPERATOR_STOP
    ) -> list[dict[str, Any]]:
        """Latch and safe-stop (no storage but the robot's own latch file): the named robots,
        or every configured one; connected robots first. ``by`` is recorded in each latch as
        who stopped it (`SESSION_LAPSE` for the session watchdog). New ticks and work-lane RPCs
        wait until it is done (`StopFirst`); it runs at a stop's priority, with no automatic
        garbage collection (`tether._priority.stop_priority`)."""
        with stop_priority(), self.stop_first.stopping():
            return self._stop_robots(request, by)

    def _stop_robots(self, request: dict[str, Any], by: str) -> list[dict[str, Any]]:
        assert self.devices is not None
        devices = self.devices
        self.refresh_devices()  # a lost port is opened anew below, never stopped through
        named = request.get("robots") or ([request["robot"]] if request.get("robot") else None)
        names = [str(n) for n in named] if named else sorted(self.config.robots)
        for name in names:
            self.config.robot(name)  # an unknown robot: nothing is sent
        reports: list[dict[str, Any]] = []
        later = []
        for name in names:
            if name in devices.identities:
                try:
                    reports.append(devices.stop_report(name, latch=True, by=by))
                except Exception as exc:
                    failed = devices.device_type(name).stop_failure(
                        self.config.robot(name), f"{type(exc).__name__}: {exc}"
                    )
                    reports.append(failed.as_dict())
            else:
                later.append(name)
        for name in later:
            with devices.latch.stopping():
                devices.latch.latch(name, by=by)  # latched before its port is opened
                try:
                    if devices.connect_for_stop(name):
                        self.unavailable.pop(name, None)
                    reports.append(devices.stop_report(name))
                except Exception as exc:
                    failed = devices.device_type(name).stop_failure(
                        self.config.robot(name), f"{type(exc).__name__}: {exc}"
                    )
                    reports.append(failed.as_dict())
        return reports

    def _operator(self, request: dict[str, Any]) -> str:
        """The operator a request's credential belongs to, verified against this daemon's own
        host.toml (rate-limited); never the name a client claims."""
        secret = request.get("credential")
        return self.config.authenticate(secret if isinstance(secret, str) else None)

    def _on_resume(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.devices is not None
        robot = _text(request, "robot")
        self.config.robot(robot)
        operator = self._operator(request)
        return self.devices.resume(robot, operator=operator)

    def _on_reboot(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.devices is not None
        robot = _text(request, "robot")
        self.config.robot(robot)
        operator = self._operator(request)
        if robot not in self.devices.identities:
            self.devices.connect(robot)
        done = self.devices.reboot(
            robot,
            [str(j) for j in request.get("joints") or []],
            operator=operator,
            arm_supported=bool(request.get("arm_supported")),
        )
        runtime = self.host()
        refreshed = decisions.refresh_for_robot(
            runtime.catalog,
            runtime.artifacts,
            robot,
            done["read_back"],
            f"rebooted by {operator} (ids {done['rebooted_ids']})",
            review=self.review(),
        )
        shown = {k: v for k, v in done.items() if k != "state"}  # SI only, never ticks
        return {**shown, "refreshed": refreshed}

    def review(self) -> Any:
        """The operator review of this host's devices (evidence for decisions)."""
        from tether.operator.cli import review_for

        artifacts = None if self.runtime is None else self.runtime.artifacts
        return review_for(self.config, self.data_dir, artifacts)

    def _on_operator_list(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        runtime = self.host()
        return decisions.listing(runtime.catalog, runtime.artifacts)

    def _on_operator_show(self, request: dict[str, Any]) -> dict[str, Any]:
        runtime = self.host()
        return decisions.show(runtime.catalog, runtime.artifacts, _text(request, "id"))

    def _on_operator_resolve(self, request: dict[str, Any]) -> dict[str, Any]:
        runtime = self.host()
        revision = request.get("revision")
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise ServeRefusal("bad_request", "`revision` must be an integer")
        operator = request.get("operator")
        secret = request.get("credential")
        return decisions.resolve(
            runtime.catalog,
            runtime.artifacts,
            _text(request, "id"),
            decision=_text(request, "decision"),
            revision=revision,
            operator=operator if isinstance(operator, str) else None,
            credential=secret if isinstance(secret, str) else None,
            verify_credential=self.config.authenticate,
            note=str(request.get("note") or ""),
            review=self.review(),
            host=self.decision_host,
            before_abandon=self.before_abandon,
        )

    def before_abandon(self, record: ActivityRecord) -> None:
        """An operator's abandon of `record` here, first put to its family's adapter when it
        takes one (`before_abandon`: a bridge cancels the move on the robot host, and refuses
        the abandon while the move may still run there); refusals are the operator's
        (`decisions.rejection`)."""
        family = families_by_kind(self.host().families).get(record.key.kind)
        hook = getattr(family.adapter, "before_abandon", None) if family is not None else None
        if callable(hook):
            try:
                hook(record)
            except CodedError as exc:
                raise decisions.rejection(exc.code, exc.message) from None

    def _view(self, key: ActivityKey, record: ActivityRecord | None = None) -> dict[str, Any]:
        runtime = self.host()
        record = record if record is not None else runtime.get(key)
        seq, content = self.latest(key)
        return {**views.view(key, record, runtime.artifacts, content), "seq": seq}

    @property
    def decision_host(self) -> str | None:
        """The host an operator decision here may concern (`decisions.resolve`'s `host`): on
        a catalog hosts share, this one's `host_name` (an Activity bound to another host's
        device is that host's daemon's to decide: it reads the device); None on a catalog of
        its own, where every Activity is this host's whatever name it was bound under."""
        shared = self.serve.host_name and is_shared(self.serve.catalog_url)
        return self.serve.host_name if shared else None

    @property
    def default_world(self) -> str:
        """The world a submit naming none writes: `local`, named for this host on a world
        ledger shared by hosts (`local@<host_name>`: this daemon writes only its own)."""
        return f"local@{self.world_owner}" if self.world_owner else "local"

    def _on_submit(self, request: dict[str, Any]) -> dict[str, Any]:
        world = self.default_world if request.get("world") is None else _text(request, "world")
        activity = _text(request, "activity")
        kind = _text(request, "kind")
        body = request.get("request")
        if not isinstance(body, dict):
            raise ServeRefusal("bad_request", "`request` must be a JSON object")
        key, created, record = self.submit_admitted(world, activity, kind, body)
        view = {**self._view(key, record), "created": created}
        crash_point("serve.after_submit")  # committed, not answered: a retry gets the same
        return view

    def submit(
        self,
        world: str,
        activity: str,
        kind: str,
        body: dict[str, Any],
        *,
        exclusive: frozenset[str] = frozenset(),
        unrecorded: tuple[ActivityKey, ...] = (),
    ) -> tuple[ActivityKey, bool]:
        """Commit one request as intent (idempotent per activity id of `world`; another request
        under the id is `admission_conflict`): the one path of the control socket's `submit`
        and gRPC's `Execute`. Returns the key and whether this call committed it, only once
        the intent is durable; concurrent submits of one world share a tick (`_group_commit`).
        `exclusive` names components that must not be on the intent's entity, `unrecorded`
        catalog keys that must hold no record (gRPC: one operation id names one operation
        across families and kinds); either is `admission_conflict`."""
        key, created, _ = self.submit_admitted(
            world, activity, kind, body, exclusive=exclusive, unrecorded=unrecorded
        )
        return key, created

    def submit_admitted(
        self,
        world: str,
        activity: str,
        kind: str,
        body: dict[str, Any],
        *,
        exclusive: frozenset[str] = frozenset(),
        unrecorded: tuple[ActivityKey, ...] = (),
    ) -> tuple[ActivityKey, bool, ActivityRecord | None]:
        """`submit`, also returning the catalog record its tick's projection admitted, as the
        admission left it (None when this call did not create the intent, or that tick's
        post-commit work did not report it): an answer needs no read of the catalog."""
        runtime = self.host()
        check_owned(world, self.world_owner)  # never a read of, nor an answer from, another's
        served = self.served.get(kind)
        if served is None:
            raise ServeRefusal(
                "not_submittable",
                f"no served family has kind {kind!r} (served: {', '.join(sorted(self.served))})",
            )
        if served.submit is None:
            raise ServeRefusal("not_submittable", f"{kind} takes no submitted request")
        write = served.submit(activity, kind, body)  # checked before anything is committed
        key = ActivityKey(world, kind, activity)
        mine = _Submit(key, write, exclusive, unrecorded)
        created = self._group_commit(runtime, world, mine)
        if self.live is not None:
            self.live.note(key)
        log.debug("submitted", extra={"key": views.key_text(key), "new": created})  # see Execute
        return key, created, mine.record

    def _group_commit(self, runtime: Host, world: str, mine: _Submit) -> bool:
        """Queue `mine` for its world and return once its batch is committed (whether it
        created the intent), or raise its refusal or the batch's failure.

        Group commit: one caller per world at a time is the committer. It takes every queued
        submit of the world (at most `SUBMIT_BATCH`, in arrival order: what queued while the
        previous commit ran; a lone submit never waits for company), commits them as one tick
        (`_commit_batch`), answers them, and hands the role to the oldest submit still
        queued."""
        with self._submit_lock:
            queue = self._pending.setdefault(world, [])
            queue.append(mine)
            lead = world not in self._committing
            if lead:
                self._committing.add(world)
        if not lead:
            mine.wake.wait()  # answered, or handed the committer's role
        if mine.done:
            return mine.answer()
        with self._submit_lock:
            batch = queue[:SUBMIT_BATCH]
            del queue[:SUBMIT_BATCH]
        try:
            self._commit_batch(runtime, world, batch)
        except BaseException as exc:  # nothing half-answered: the whole batch failed
            for item in batch:
                item.error, item.created = exc, False
        finally:
            with self._submit_lock:
                following = queue[0] if queue else None
                if following is None:
                    self._committing.discard(world)
                    self._pending.pop(world, None)
            for item in batch:
                item.done = True
                item.wake.set()
            if following is not None:
                following.wake.set()  # it commits the next batch
        return mine.answer()

    def _commit_batch(self, runtime: Host, world: str, batch: list[_Submit]) -> None:
        """Decide each submit of `batch` on one snapshot and commit the new intents in one
        tick. Per request: new: written (`created`); equal to what the world holds: the
        existing one; another request under the id: `admission_conflict`. Inside the batch the
        first request under an id wins: an equal one later is answered with it (not created),
        a different one is `admission_conflict`, as is one whose entity holds (or is given in
        the batch) one of its `exclusive` components, or one of whose `unrecorded` keys has a
        catalog record (read here, by the one committing thread: not by every caller)."""
        self.stop_first.wait_clear()  # a running stop goes first
        try:
            runtime.head(world)
        except WorldNotFound:
            runtime.create_world(world)
        snapshot = runtime.snapshot(world)
        chosen: dict[tuple[str, str], Any] = {}
        writes: list[ComponentWrite] = []
        for item in batch:
            write = item.write
            slot = (write.entity, write.component)
            clash = next(
                (
                    c
                    for c in sorted(item.exclusive)
                    if snapshot.get(write.entity, c) is not None or (write.entity, c) in chosen
                ),
                None,
            )
            if clash is not None:
                item.error = ServeRefusal(
                    "admission_conflict",
                    f"{item.key.activity_id} of world {world} names another operation ({clash})",
                    details={"key": views.key_text(item.key), "component": clash},
                )
                continue
            recorded = next((k for k in item.unrecorded if runtime.get(k) is not None), None)
            if recorded is not None:
                item.error = ServeRefusal(
                    "admission_conflict",
                    f"{item.key.activity_id} of world {world} names another operation "
                    f"({recorded.kind})",
                    details={"key": views.key_text(item.key), "kind": recorded.kind},
                )
                continue
            held = snapshot.get(*slot)
            if held is None and slot in chosen:
                held = chosen[slot]
            if held is None:
                chosen[slot] = write.value
                writes.append(write)
                item.created = True
            elif held != write.value:
                item.error = ServeRefusal(
                    "admission_conflict",
                    f"activity {item.key.activity_id} of world {world} is another request:"
                    f" {json.dumps(held, sort_keys=True)}",
                    details={"key": views.key_text(item.key), "held": held},
                )
        crash_point("serve.before_submit_tick")  # collected, not committed: nobody answered
        if writes:
            admitted: list[ActivityRecord] = []
            runtime.commit_tick(world, writes, admitted=admitted)
            records = {record.key: record for record in admitted}
            for item in batch:
                if item.created:
                    item.record = records.get(item.key)

    def _on_get(self, request: dict[str, Any]) -> dict[str, Any]:
        key = _key(request)
        doc = self._view(key)
        self._check_known(key, doc)
        return doc

    def _check_known(self, key: ActivityKey, doc: dict[str, Any]) -> None:
        """`unknown_activity` for a key nothing was submitted under: no record, and no intent
        in its world that a served family projects (one submitted and not yet admitted has
        its intent). Its view said `unknown`, never final, so a watch of a typo ran until its
        timeout: for ever by default."""
        if doc["state"] != "unknown":
            return
        runtime = self.host()
        served = self.served.get(key.kind)
        if served is not None and key.world_id in runtime.ledger.worlds():
            try:
                projected = served.family.project(runtime.snapshot(key.world_id))
            except TetherError:
                return  # the world cannot be read now: not proof that nothing is there
            if any(r.activity_id == key.activity_id and r.kind == key.kind for r in projected):
                return
        raise ServeRefusal(
            "unknown_activity",
            f"nothing was submitted as {views.key_text(key)}: no such activity",
            details={"key": views.key_text(key)},
        )

    def _on_watch(self, request: dict[str, Any]) -> dict[str, Any]:
        """The record's view once it differs from what the client saw (`seq`, `state`,
        `attempts`), or after `timeout_s` (at most 20 s) unchanged."""
        key = _key(request)
        seen = (request.get("seq"), request.get("state"), request.get("attempts"))
        timeout = request.get("timeout_s", MAX_WATCH_S)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise ServeRefusal("bad_request", "`timeout_s` must be a number")
        deadline = time.monotonic() + max(0.0, min(float(timeout), MAX_WATCH_S))
        self._check_known(key, self._view(key))
        while True:
            doc = self._view(key)
            if (doc["seq"], doc["state"], doc["attempts"]) != seen or doc["final"]:
                return doc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return doc
            with self._changed:
                # Progress wakes it at once; a state change is seen within 0.1 s.
                if self._seq == doc["seq"]:
                    self._changed.wait(min(remaining, 0.1))

    def _on_live_canonical(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.live is None:
            raise ServeRefusal(
                "live_off", 'this daemon serves no live endpoint ([serve] live = "off")'
            )
        self.host()
        return self.live.canonical(request)

    def _on_status(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.devices is not None
        runtime = self.host()
        devices = []
        for name in sorted(self.config.robots):
            devices.append(self.device_status(name))
        doc: dict[str, Any] = {
            "daemon": {"pid": os.getpid(), **self._record()},
            "devices": devices,
        }
        families = self.served_families()
        adapters = self.adapter_status()
        if adapters:
            doc["adapters"] = adapters

        def read() -> tuple[Any, Any]:
            return (
                views.counts(runtime, families),
                decisions.listing(runtime.catalog, runtime.artifacts),
            )

        with self._stores_lock:
            pending = self._stores_read
            if pending is None or pending.done.is_set():
                pending = self._stores_read = _StoresRead(read)
        if not pending.done.wait(STATUS_STORES_S):
            # The devices are this process's own: stores that do not answer (a database that
            # hangs) leave them shown, and say what is not known.
            doc.update(
                activities=None,
                parked=None,
                stores_error=f"storage_stalled: the catalog did not answer within"
                f" {STATUS_STORES_S:g} s (a database that hangs, or one far too slow)",
            )
            return doc
        if isinstance(pending.error, TetherError):
            # A store that cannot be read (a database outage) leaves them shown too.
            code, message, _ = error_fields(pending.error)
            doc.update(activities=None, parked=None, stores_error=f"{code}: {message}")
        elif pending.error is not None:
            raise pending.error
        else:
            doc["activities"], doc["parked"] = pending.value
        return doc

    def served_families(self) -> list[Family]:
        """Each family this daemon serves, once (a family serves one or more kinds)."""
        return list({id(s.family): s.family for s in self.served.values()}.values())

    def adapter_status(self) -> list[dict[str, Any]]:
        """What each served family's adapter says of itself, where it takes `status()` (a
        bridge: whether its robot host answers): a document with a `summary` line each; an
        adapter that fails to say is reported, not raised."""
        out = []
        for family in self.served_families():
            hook = getattr(family.adapter, "status", None)
            if not callable(hook):
                continue
            try:
                said = hook()
            except Exception as exc:  # an adapter's own mistake: status still answers
                log.warning("status of family %s failed: %r", family.name, exc)
                said = {"summary": f"status failed: {type(exc).__name__}: {exc}"}
            if isinstance(said, dict):
                out.append({"family": family.name, **said})
        return out

    def device_status(self, name: str) -> dict[str, Any]:
        """A configured robot's status document: whether it is available and latched, and its
        safe-stop policy."""
        assert self.devices is not None
        devices = self.devices
        doc: dict[str, Any] = {
            "robot": name,
            "owner_pid": os.getpid(),
            "latched": devices.latched(name),
            "safe_stop": self.config.spec(name).safe_stop,
        }
        if doc["latched"]:  # who stopped it: an operator, or the session watchdog
            doc["stop_reason"] = devices.latch.stop_reason(name)
        identity = devices.identities.get(name)  # one read: the device watch may drop it
        if identity is None:
            return {
                **doc,
                "available": False,
                "owner_pid": None,
                "error": self.unavailable.get(name, "not connected"),
            }
        doc["available"] = True
        doc["identity"] = identity.as_dict()
        robot = self.config.robot(name)
        try:
            state = devices.device_type(name).read_state(devices._bus(name), robot)
            doc["read_back"] = devices.device_type(name).si_state(robot, state)
        except Exception as exc:
            doc["read_back"] = None
            doc["error"] = f"{type(exc).__name__}: {exc}"
        return doc


__all__ = [
    "CODES",
    "CRASH_POINTS",
    "Daemon",
    "ServeRefusal",
    "data_lock_path",
    "serve_socket",
    "state_lock_path",
]
