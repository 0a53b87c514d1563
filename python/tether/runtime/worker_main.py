"""`tether worker`: run Activity worker threads in their own process over a data directory.

Usage: tether worker DATA_DIR --families module:factory [--workers N] [--lease-ms MS]
                     [--config host.toml] [--catalog URL] [--world URL] [--host NAME]
                     [--fallback-poll-s S]
                     [--sse-host 127.0.0.1] [--sse-port N]
`factory(data_dir: Path) -> Sequence[Family]` builds the families (and their adapters) in this
process. Workers share the catalog (`--catalog URL`, default the data directory's
`catalog.db`; a PostgreSQL catalog is shared by hosts) and the artifact store with the Host;
they never write the world ledger (`--world URL` is only checked at start). SIGINT/SIGTERM
stop them: no new claim, and the attempts running get the shutdown bound (30 s,
`TETHER_SHUTDOWN_BOUND_S`) to end; one still running then (a long episode, or a database that
stopped answering) is left to the next claim to reconcile, and the process says so and exits 1
(`shutdown_stalled`).

With `--sse-port` (0 = any free port) the process serves its live progress as one AG-UI run
over SSE at http://HOST:PORT/events (the address is printed on stdout): RUN_STARTED, one
activity message per Activity these workers run (messageId `world/kind/id`, activityType the
kind) with the adapters' progress as ACTIVITY_DELTA events and each attempt's conclusion
(`state`: executing, reconciling, then result, error, recovered, confirmed_absent or unknown),
and RUN_FINISHED when the workers stop. A late subscriber gets RUN_STARTED, a MESSAGES_SNAPSHOT
of the messages so far, then the live events. The stream is live only: never durable.
"""

from __future__ import annotations

import importlib
import logging
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any, cast

from tether import _exit
from tether._args import (
    STOP_SIGNALS,
    Parser,
    error_line,
    nonempty_path,
    refuse,
    refuse_empty_urls,
    warn_url_secrets,
)
from tether._coded import CodedError
from tether._config import clipped
from tether._dirs import DataDirError, usable_dir
from tether._priority import quiet_heap
from tether._proc import abandon_shutdown, close_within, shutdown_bound_s, wait_for_signal
from tether.activities import MAX_LEASE_MS, Catalog, ResultRef
from tether.agui import LiveActivities, RunStream, StoreState, StreamServer
from tether.devices.config import CONFIG_ENV
from tether.errors import TetherError
from tether.runtime._artifacts import DEFAULT_INLINE_BOUND, ArtifactStore, shared_for
from tether.runtime._errors import bad_families, call_factory
from tether.runtime._family import (
    Adapter,
    AttemptContext,
    ConfirmedAbsent,
    Family,
    ProgressEvent,
    ReconcileOutcome,
    Recovered,
    Unknown,
)
from tether.runtime._pool import WorkerPool
from tether.runtime._wakeup import (
    CLAIMABLE,
    DEFAULT_FALLBACK_S,
    MAX_FALLBACK_S,
    MIN_FALLBACK_S,
    Wakeup,
)
from tether.runtime._worker import MAX_WORKERS
from tether.storage._errors import MixedStores, SameStoreFile
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

log = logging.getLogger("tether.runtime.worker")

FamiliesFactory = Callable[[Path], Sequence[Family]]
#: The codes `tether worker` documents (a test checks them against `tether._exit`).
EXIT_CODES = (_exit.OK, _exit.FAILED, _exit.USAGE, _exit.STORE_UNUSABLE, _exit.UNAVAILABLE)
_EPILOG = (
    "exit codes: 0 stopped on a signal; 1 its workers or stores did not close within the "
    "shutdown bound (`shutdown_stalled`), the server refuses the login (`login_refused`), "
    "the catalog's clock (`clock_unavailable`) or the schema (`schema_denied`); 2 usage, the "
    "families, a data dir another user could control, a bad store URL or a database or schema "
    "the server does not have (`bad_url`, `no_such_database`, `no_such_schema`), the catalog "
    "and the world ledger in one SQLite file (`same_store_file`); 5 a store that cannot be "
    "used (an older schema, `migration_needed`: `tether db upgrade`); 7 a server that cannot "
    "be reached (`unreachable`), or a family's devices another process owns (`port_owned`) "
    "(see `tether --help`)."
)


def load_factory(spec: str) -> FamiliesFactory:
    """Import `module:function`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise bad_families(f"--families must look like module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a misspelt module, or one whose own imports fail
        raise bad_families(f"--families {spec}: cannot import {module_name}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise bad_families(f"{spec!r} is not a callable")
    return cast(FamiliesFactory, factory)


def run_workers(
    data_dir: Path,
    families: Sequence[Family],
    *,
    workers: int = 1,
    lease_ms: int = 30_000,
    fallback_poll_s: float = DEFAULT_FALLBACK_S,
    inline_bound: int = DEFAULT_INLINE_BOUND,
    stop: threading.Event | None = None,
    emit: Callable[[ProgressEvent], None] | None = None,
    catalog_url: str | None = None,
    host: str | None = None,
    close_bound_s: float | None = None,
) -> None:
    """Run `workers` worker threads until `stop` is set; return after they finish (with
    `close_bound_s`, raise `ShutdownStalled` when they, the doorbell, the catalog and the
    artifact store are not closed within that long: a store that stopped answering).

    Idle workers wake when an Activity becomes claimable: a commit in any process sharing the
    catalog rings its doorbell (the data directory's, or LISTEN/NOTIFY on PostgreSQL), and
    lease expiry and backoff run on timers; `fallback_poll_s` (>= 1 s) only bounds a lost
    ring. `emit` receives every adapter's progress (from any worker thread). `catalog_url`
    defaults to `catalog.db` in `data_dir`. `host` names this host: its workers claim the
    Activities bound to its devices and unbound ones (None: unbound ones only).
    """
    data_dir = data_dir.resolve()
    url = catalog_url or sqlite_url(data_dir / "catalog.db")  # data_dir is absolute
    # On PostgreSQL the payloads go to the catalog's table (connected at the first use).
    artifacts = ArtifactStore(
        data_dir / "artifacts", inline_bound=inline_bound, shared=shared_for(url)
    )
    stop = stop or threading.Event()
    catalog = Catalog.open(url)  # the doorbell's owner while the workers run
    wakeup = Wakeup(stop, fallback_poll_s, doorbell=catalog.doorbell, topic=CLAIMABLE)
    pool = WorkerPool(
        lambda: Catalog.open(url),
        artifacts,
        families,
        instance=f"proc-{uuid.uuid4().hex[:8]}",
        lease_ms=lease_ms,
        emit=emit,
        wakeup=wakeup,
        host=host,
    )
    pool.start(workers)

    def close() -> None:
        pool.close()
        wakeup.close()
        catalog.close()
        artifacts.close()

    try:
        wait_for_signal(stop)  # a signal handler sets it; then every idle worker is woken
    finally:
        if close_bound_s is None:
            close()
        elif not close_within(close, close_bound_s):
            raise ShutdownStalled(close_bound_s)


class ShutdownStalled(Exception):
    """`run_workers` gave up waiting for its workers and stores to close (`close_bound_s`)."""

    def __init__(self, bound_s: float) -> None:
        super().__init__(f"not closed within {bound_s:g} s")
        self.bound_s = bound_s


def result_summary(result: ResultRef) -> dict[str, Any]:
    """A result as the live stream shows it: its digest, media type and whether it failed."""
    return {"digest": result.digest, "media_type": result.media_type, "failed": result.failed}


class LiveAdapter:
    """An adapter that reports each attempt's start and conclusion as live activity content.

    Only what the attempt itself returns is reported (the catalog decides what is recorded);
    the wrapped adapter's behaviour, results and exceptions pass through unchanged.
    A new attempt starts from fresh content: nothing of an earlier attempt lingers.
    """

    def __init__(self, inner: Adapter, live: LiveActivities) -> None:
        self.inner = inner
        self.live = live

    def _report(
        self, ctx: AttemptContext, *, fresh: bool = False, final: bool = False, **changes: Any
    ) -> None:
        """``final``: the attempt returned the Activity's result (its last report here), so
        the message is concluded: the stream keeps it among its most recent settled ones
        only (`LiveActivities`: bounded however long the worker runs), and reports nothing
        more of it."""
        try:
            if final:
                self.live.conclude(ctx.key, {"attempt": ctx.attempt, **changes})
                return
            report = self.live.reset if fresh else self.live.update
            report(ctx.key, attempt=ctx.attempt, **changes)
        except Exception:  # the live stream must never fail an attempt
            log.exception("live report for %s failed", ctx.key)

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        """Run the inner `execute`, reporting "executing" then "result" or "error"."""
        self._report(ctx, fresh=True, state="executing")
        try:
            result = self.inner.execute(ctx, request)
        except BaseException as e:
            self._report(ctx, state="error", error=f"{type(e).__name__}: {e}")
            raise
        if isinstance(result, ResultRef):
            self._report(ctx, final=True, state="result", result=result_summary(result))
        return result

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        """Run the inner `reconcile`, reporting "reconciling" then its conclusion."""
        self._report(ctx, fresh=True, state="reconciling")
        try:
            outcome = self.inner.reconcile(ctx, request)
        except BaseException as e:
            self._report(ctx, state="error", error=f"{type(e).__name__}: {e}")
            raise
        if isinstance(outcome, Recovered):
            self._report(ctx, final=True, state="recovered", result=result_summary(outcome.result))
        elif isinstance(outcome, ConfirmedAbsent):
            self._report(ctx, state="confirmed_absent")
        elif isinstance(outcome, Unknown):
            self._report(ctx, state="unknown", retry_after_ms=outcome.retry_after_ms)
        return outcome


def live_families(families: Sequence[Family], live: LiveActivities) -> list[Family]:
    """The families with adapters that report attempts to `live` (see `LiveAdapter`)."""
    return [replace(f, adapter=LiveAdapter(f.adapter, live)) for f in families]


def _check_stores(catalog_url: str | None, world_url: str | None) -> None:
    """Open and close the stores named (`main` names the catalog, the data dir's own when no
    URL is given) once, so a bad URL, an unreachable server, a wrong password, an outdated
    schema or a file that is not the store's is one line before "ready" and any thread."""
    if catalog_url is not None:
        Catalog.open(catalog_url).close()
    if world_url is not None:
        from tether.storage import dbcli
        from tether.storage._urls import postgres_url
        from tether.world import open_ledger

        try:  # workers never write the world: one not made yet is not made here either
            # Read as the world ledger's own session: a failure names that store.
            found = {s.store for s in dbcli.status(world_url, application="tether-world")}
            # On PostgreSQL the catalog may share its database and schema: no world yet. A
            # SQLite file holding the catalog is the other store's, which the open refuses.
            if "world" not in found and (not found or postgres_url(world_url) is not None):
                return
        except dbcli.UrlError:
            pass  # the ledger's own open says what is wrong with the URL
        open_ledger(world_url).close()


def _store_exit(e: TetherError) -> int:
    """A store that could not be opened at start, by its code (`tether._exit.for_error`): an
    older schema or a damaged file (5), a server that cannot be reached (7), a refused login
    (1), a bad URL or a schema the server does not have (2); any other failure (the server
    answered and refused, say a right the role lacks) is 1, as for `tether serve`."""
    return _exit.for_error(e, default=_exit.FAILED)


def _from_config(p: Parser, args: Any) -> None:
    """Fill what `--config` (else `$TETHER_HOST_CONFIG`) names and the flags leave unset: the
    catalog and world URLs and the host name of its `[serve]` table, as `tether serve` on that
    file uses them (a worker beside its daemon shares its stores and its host name). The
    families read the same file (`$TETHER_HOST_CONFIG`, set to it when unset); two different
    files are a usage error. Raises the configuration's own error (a misspelled key, say)."""
    import os

    env = os.environ.get(CONFIG_ENV)
    if args.config is not None and env and Path(env).absolute() != Path(args.config).absolute():
        p.error(f"--config {args.config} and ${CONFIG_ENV} ({env}) name different files")
    path = args.config or env
    if not path:
        if args.host is None:
            args.host = socket.gethostname()
        return
    from tether.devices.config import load_config
    from tether.serve.config import load_serve

    config: Any = load_config(path)
    serve = load_serve(path, state_dir=config.state_dir, robots=len(config.robots))
    if args.catalog is None:
        args.catalog = serve.catalog_url
    if args.world is None:
        args.world = serve.world_url
    if args.host is None:
        args.host = serve.host_name
    if not os.environ.get(CONFIG_ENV):  # unset or empty: the families read this file
        os.environ[CONFIG_ENV] = str(path)


def main(argv: list[str]) -> int:
    """Entry point of `tether worker`."""
    p = Parser(prog="tether worker", description=__doc__, epilog=_EPILOG)
    p.add_argument("data_dir", type=nonempty_path("the data dir"), help="the Host data directory")
    p.add_argument("--families", required=True, help="module:function returning the families")
    p.add_argument("--workers", type=int, default=1, help="worker threads")
    p.add_argument(
        "--lease-ms",
        type=int,
        default=30_000,
        help=f"attempt lease in ms, 1 to {MAX_LEASE_MS} (7 days) (default: %(default)s)",
    )
    p.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"the host configuration (host.toml; default: ${CONFIG_ENV} when set): its"
        " [serve] catalog, world and host_name are this worker's unless --catalog, --world or"
        " --host says otherwise, as they are `tether serve`'s; the families read it too",
    )
    p.add_argument(
        "--catalog",
        metavar="URL",
        default=None,
        help="the Activity catalog (default: sqlite:///DATA_DIR/catalog.db); postgresql://host/db"
        " shares it with other hosts. Passwords come from PGPASSWORD or a password file"
        " (PGPASSFILE), never the URL; they are never printed",
    )
    p.add_argument(
        "--world",
        metavar="URL",
        default=None,
        help="the world ledger the Host uses (checked at start: reachable, schema current;"
        " workers never write it)",
    )
    p.add_argument(
        "--fallback-poll-s",
        type=float,
        default=DEFAULT_FALLBACK_S,
        help="longest idle sleep without a wakeup, in s, from"
        f" {MIN_FALLBACK_S:g} to {MAX_FALLBACK_S:g}; idle workers wake on the catalog's"
        " doorbell (the data directory's, or LISTEN/NOTIFY on PostgreSQL) and on lease and"
        " backoff timers, so"
        " this only bounds a lost wakeup (default: %(default)s)",
    )
    p.add_argument(
        "--host",
        metavar="NAME",
        default=None,
        help="this host's name: workers claim the Activities bound to its devices (admitted"
        " with this name as their host) and unbound ones (default: --config's [serve]"
        f" host_name, else the hostname, {socket.gethostname()})",
    )
    p.add_argument("--sse-host", default="127.0.0.1", help="bind address of the AG-UI stream")
    p.add_argument(
        "--sse-port",
        type=int,
        default=None,
        help="serve live progress as AG-UI SSE; 0 = any (default: none, no stream)",
    )
    args = p.parse_args(argv)
    if not 1 <= args.workers <= MAX_WORKERS:  # each opens its own catalog connection
        p.error(f"--workers must be in [1, {MAX_WORKERS}] ([serve] workers' bound)")
    if args.host is not None and (
        not args.host or len(args.host.encode()) > 512 or "\0" in args.host
    ):
        p.error("--host must be a non-empty name of at most 512 bytes")
    if not 1 <= args.lease_ms <= MAX_LEASE_MS:
        p.error(f"--lease-ms must be in [1, {MAX_LEASE_MS}] (7 days)")
    if not MIN_FALLBACK_S <= args.fallback_poll_s <= MAX_FALLBACK_S:
        p.error(f"--fallback-poll-s must be in [{MIN_FALLBACK_S:g}, {MAX_FALLBACK_S:g}] (a day)")
    if args.sse_port is not None and not 0 <= args.sse_port <= 65535:
        p.error("--sse-port must be in [0, 65535]")
    refuse_empty_urls(p, catalog=args.catalog, world=args.world)
    try:  # the flags checked, the host configuration gives what they leave unset
        _from_config(p, args)
    except TetherError as e:
        error_line("tether worker", e)
        return _exit.for_error(e, default=_exit.USAGE)
    for what, url in (("catalog", args.catalog), ("world", args.world)):
        why = unsupported_url(what, url, paths=True)  # a path is the worker's file
        if why is not None:
            error_line("tether worker", CodedError("bad_url", why, details={"store": what}))
            return _exit.USAGE
    try:  # one SQLite file for both stores, or one store shared and the other not: refused
        check_separate_files(args.catalog, args.world)  # before the families make anything
        if args.world is not None:  # the worker reads no world: only a given one is checked
            check_one_backend(args.catalog, args.world)
    except (SameStoreFile, MixedStores) as e:
        error_line("tether worker", e)
        return _exit.USAGE
    host = str(args.host)  # set by now: the flag, the [serve] host_name or the hostname
    if postgres_url(args.catalog) is not None and not SHARED_HOST_NAME.fullmatch(host):
        # Work is bound to a daemon's name on a shared catalog, and a daemon's name there is
        # one of these: a worker under another would silently never claim device work.
        shown = clipped(host)
        error_line(
            "tether worker",
            CodedError(
                "bad_host_name",
                f"--host {shown!r}: a host's name on a catalog hosts share is the name its"
                f" daemon's work is bound to: {SHARED_HOST_RULE}",
                details={"host": shown},
            ),
        )
        return _exit.USAGE
    try:  # private to this user, as `tether serve`'s: checked before anything is made in it
        # On SQLite the catalog is DATA_DIR/catalog.db of a Host or `tether serve`: a data dir
        # that does not exist is a mistyped one (made, it would hold an empty catalog nobody
        # writes, and the worker would wait on it for ever). Its stores elsewhere, a worker
        # makes its own data dir (its artifacts' cache).
        args.data_dir = usable_dir(
            args.data_dir, what="worker data_dir", create=args.catalog is not None
        )
    except DataDirError as e:
        if e.code == "no_such_directory":
            e = DataDirError(
                e.code,
                f"{e.message}: on SQLite a worker opens the catalog.db of a Host's or `tether"
                " serve`'s data dir; name that one (nothing was created)",
                details=e.details,
            )
        error_line("tether worker", e)
        return _exit.for_error(e, default=_exit.USAGE)
    try:
        factory = load_factory(args.families)
        families = call_factory(args.families, lambda: list(factory(args.data_dir)))
        if not families or not all(isinstance(f, Family) for f in families):
            raise bad_families(f"{args.families} must return a non-empty list of Family")
        for family in families:
            if family.device_host is not None and family.device_host != args.host:
                raise bad_families(
                    f"family {family.name} drives the devices of host {family.device_host!r}"
                    f" (its configuration's host name), but this worker claims the device work"
                    f" of host {args.host!r} (--host): it would run that host's moves on this"
                    f" host's robots; pass --host {family.device_host}"
                )
    except (ImportError, TetherError) as e:
        error_line("tether worker", e)
        return _exit.for_error(e, default=_exit.USAGE)
    for family in families:
        busy = family.devices_busy() if family.devices_busy is not None else None
        if busy is not None:  # it would claim the host's device work and could not drive it
            refusal = PortBusy(
                "port_owned",
                f"family {family.name} cannot drive its devices: {busy}; run this worker"
                " without that family, or only where no other process owns the devices",
            )
            error_line("tether worker", refusal)
            return _exit.for_error(refusal)
    catalog = args.catalog or sqlite_url(Path(args.data_dir).absolute() / "catalog.db")
    try:  # the data dir's own catalog.db too: a file cut short is said before "ready"
        _check_stores(catalog, args.world)
    except TetherError as e:
        error_line("tether worker", e)
        return _store_exit(e)
    # Said once the stores were checked (a refusal is one line, and the one that matters).
    warn_url_secrets("tether worker", catalog=args.catalog, world=args.world)
    served = None if args.sse_port is None else _stream_server(args)  # bound before "ready"
    if isinstance(served, int):
        return served
    print(  # what it works on, before it waits for work (stderr: stdout is the stream's)
        f"tether worker ready: {args.workers} worker(s) for host {args.host!r} on catalog"
        f" {redact(catalog)}, families {', '.join(f.name for f in families)}",
        file=sys.stderr,
        flush=True,
    )
    # A long-running process, as `tether serve`: no full collection rescans its start-up
    # heap, and full collections run a tenth as often (`tether._priority.quiet_heap`).
    quiet_heap()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (*STOP_SIGNALS, signal.SIGINT):  # SIGHUP too: a closed ssh session
        signal.signal(sig, on_signal)
    bound = shutdown_bound_s()
    try:
        return _serve_workers(args, families, stop, bound, served)
    except ShutdownStalled as exc:
        abandon_shutdown("tether worker", exc.bound_s)


def _stream_server(args: Any) -> tuple[RunStream, StreamServer] | int:
    """The AG-UI stream `--sse-port` asks for, its address bound; or the exit code of its
    refusal (said): a taken address is `sse_unavailable`, exit 7, as `tether serve` and the
    demo say it."""
    stream = RunStream("tether-worker", f"run-{uuid.uuid4().hex[:12]}", StoreState())
    try:
        return stream, StreamServer(stream, args.sse_host, args.sse_port)
    except OSError as e:
        refuse(
            "tether worker",
            "sse_unavailable",
            f"cannot serve the AG-UI stream on {args.sse_host}:{args.sse_port}: {e.strerror or e}",
            error="ListenerError",
            details={"host": args.sse_host, "port": args.sse_port},
        )
        return _exit.UNAVAILABLE


def _serve_workers(
    args: Any,
    families: Sequence[Family],
    stop: threading.Event,
    bound: float,
    served: tuple[RunStream, StreamServer] | None,
) -> int:
    """`tether worker` once its arguments are checked: the workers (and the AG-UI stream of
    `served`, bound already) until `stop` is set."""
    if served is None:
        run_workers(
            args.data_dir,
            families,
            workers=args.workers,
            lease_ms=args.lease_ms,
            fallback_poll_s=args.fallback_poll_s,
            stop=stop,
            catalog_url=args.catalog,
            host=args.host,
            close_bound_s=bound,
        )
        return _exit.OK
    stream, server = served
    try:
        stream.start()
        live = LiveActivities(stream)
        print(f"AG-UI stream (SSE): {server.url}", flush=True)
        run_workers(
            args.data_dir,
            live_families(families, live),
            workers=args.workers,
            lease_ms=args.lease_ms,
            fallback_poll_s=args.fallback_poll_s,
            stop=stop,
            emit=live.progress,
            catalog_url=args.catalog,
            host=args.host,
            close_bound_s=bound,
        )
        stream.finish()
    finally:
        stream.finish(error="the worker stopped")
        server.close()
    return _exit.OK
