"""The live-event WebSocket of `tether serve`: every world's Activities at ``/live/<world>``.

`[serve] live = "HOST:PORT"` (default ``127.0.0.1:0``: any free loopback port, in the ready
line and `tether status`; ``"off"`` serves none) and `live_origins = ["https://gui.example"]`
(the browser ``Origin`` values accepted; default none: only a client that sends no Origin,
that is no browser page). One `LiveServer` serves every world; the world is the path (the URL
carries nothing but ``epoch`` and ``seq``).

Rules:

- **Feeds.** A world's `LiveFeed` is opened on its first use (a subscription, or a
  `live_canonical` read) and closed after `IDLE_S` without a subscriber; at most `MAX_FEEDS`
  are open (one more closes the longest idle one, or is refused when each has a subscriber:
  HTTP 503 on the socket, `live_busy` on the control socket); one principal holds at most
  `MAX_PER_PRINCIPAL` connections at once (one more: HTTP 429). A new feed has a new epoch, so a
  restarted daemon (or a reopened feed) is an epoch change: the subscriber re-reads.
- **Records.** A feed reads the world's Activities from the daemon's catalog: the ones the
  served families project from the world's head (re-projected when the head moves), the ones
  the daemon notes (`note`: each one submitted through it, or reporting progress, so one that
  settles between two syncs is not missed), every one it has seen since, and when it opens
  the world's latest `SETTLED_SEED` settled ones still in the catalog (a scan of the
  catalog's settled records, once per feed). An open feed keeps its latest `SETTLED_SEED`
  settled ones too, letting the oldest settled turns go whole (`SETTLED_KEPT`); the feed
  forgets what it published of them and the canonical record no longer shows them. An
  Activity a family's processor commits that reports no progress and settles between two
  syncs (0.1 s) shows only in a feed opened later. A settled record is read once (it
  changes no more). Each record's trace comes from its family's operations
  journal (`JOURNALS`: the robot move's in ``<data_dir>/robot_move``, the sim's in
  ``<data_dir>/operations``). The server's pump syncs every open feed each `SYNC_S` and sends
  a heartbeat to an idle one each `HEARTBEAT_S`.
- **Auth** is the one design of `tether._listen`: the address is bound only on loopback unless
  `[tls]` is configured (`insecure_listener`, exit 2, before any socket opens), served with the
  listener policy's TLS context (``wss://``); a principal is required on every connection,
  loopback too: a bearer token in ``Authorization: Bearer`` or the subprotocol
  ``tether.bearer.<token>`` (beside ``tether.live.v1``), verified by the daemon's
  authenticator with the roles of `read` (every role) and rate-limited per peer address
  (``net:<address>``): none or a wrong one is 401, too many failures 429 with
  ``Retry-After``. A cookie is accepted only through
  `LiveMount.session_check`: the daemon sets it when the console runs, so a logged-in
  operator's session cookie opens the stream (no console: cookies are ignored). The
  ``Origin`` must be one of `live_origins` (or absent). A token in the URL is refused (400),
  never read.
- **Canonical read.** The control op ``live_canonical {world}`` gives the feed's
  ``{epoch, seq, record, workspace_id, world}``: the record the frames describe as of that
  seq, read from the same feed the subscriber's frames come from (`Client.live_canonical`,
  `LiveClient.for_daemon`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from tether._coded import CodedError
from tether._config import HostConfigError, Table
from tether._listen import address_text

if TYPE_CHECKING:
    from tether.activities import ActivityKey, ActivityRecord
    from tether.live import LiveFeed
    from tether.live.ws import LiveCredentials, LiveServer
    from tether.operations import Journal, Operation
    from tether.runtime import Family, Host

log = logging.getLogger("tether.serve.live")

#: The `[serve]` keys read here.
LIVE_KEYS: Final = ("live", "live_origins")
DEFAULT_LIVE: Final = "127.0.0.1:0"
#: Every `.code` of the `[serve]` live keys.
LIVE_CODES: Final = ("bad_live", "bad_live_origins")
#: Every `.code` a `LiveMountError` carries.
CODES: Final = ("bad_request", "live_busy", "live_unavailable")
#: The live contract's `workspaceId` of every world a daemon serves.
WORKSPACE: Final = "tether-serve"
#: At most this many world feeds are open at once.
MAX_FEEDS: Final = 32
#: At most this many live connections of one principal are open at once (half the feeds: no
#: one credential holds every feed; one more is 429 `live_busy`).
MAX_PER_PRINCIPAL: Final = MAX_FEEDS // 2
#: A feed without a subscriber this long (s) is closed.
IDLE_S: Final = 60.0
#: Every open feed is synced from the catalog and the journals this often (s).
SYNC_S: Final = 0.1
#: An idle feed sends a heartbeat this often (s).
HEARTBEAT_S: Final = 1.0
#: Recent frames kept per world for resuming subscribers.
WINDOW: Final = 4096
#: Unsent bytes a subscriber may have before it is closed with 1013.
BUFFER_BYTES: Final = 4 * 1024 * 1024
#: A feed shows at most this many of the world's settled Activities (the latest), whole
#: turns: a new feed is seeded with them, and an open one lets its oldest settled turns go
#: once it holds `SETTLED_KEPT` more than that (every unsettled Activity stays).
SETTLED_SEED: Final = 1000
SETTLED_KEPT: Final = 100
#: Each family's operations journal in the data dir, by kind prefix (the families' layout:
#: `robot_move.family.serve_families`, `sim.provider.JOURNAL_DIR`; no family is imported).
JOURNALS: Final[Mapping[str, str]] = {
    "physical_ai.robot_move": "robot_move",
    "physical_ai.sim_episode": "operations",
}

#: The console's session check: the cookies of a request -> its principal, or None.
SessionCheck = Callable[[Mapping[str, str]], str | None]


class LiveMountError(CodedError):
    """A live request the daemon refused; `code` is one of `CODES`."""


def _config_error(code: str, message: str) -> HostConfigError:
    return HostConfigError(code, message, details={})


def check_origin(value: object) -> str:
    """One `live_origins` entry: ``http(s)://host[:port]``, as a browser sends it (lowercase,
    no path, no trailing slash)."""
    text = value if isinstance(value, str) else ""
    try:
        parts = urlsplit(text)
    except ValueError:  # "http://[::1": a broken IPv6 literal
        parts = urlsplit("")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or parts.path
        or parts.query
        or parts.fragment
        or text != f"{parts.scheme}://{parts.netloc}"
        or text != text.lower()
    ):
        raise _config_error(
            "bad_live_origins",
            f"serve.live_origins: {value!r} is not an Origin as a browser sends it: "
            "http(s)://host[:port], lowercase, no path (for example https://gui.example)",
        )
    return text


def parse_live(table: Table) -> tuple[tuple[str, int] | None, tuple[str, ...]]:
    """`live` (HOST:PORT or off) and `live_origins` of the `[serve]` table."""
    from tether.serve.config import parse_sse

    try:
        live = parse_sse(table.text("live", DEFAULT_LIVE), "serve.live")
    except HostConfigError as exc:
        raise _config_error("bad_live", exc.message) from None
    origins: tuple[str, ...] = ()
    if "live_origins" in table:
        origins = tuple(check_origin(o) for o in table.array("live_origins"))
    return live, origins


class _WorldRecords:
    """A world's Activity records for its feed (see the module rules: Records)."""

    def __init__(
        self,
        world: str,
        runtime: Callable[[], Host | None],
        families: Callable[[], Sequence[Family]],
    ) -> None:
        self.world = world
        self._runtime = runtime
        self._families = families
        self._keys: dict[ActivityKey, None] = {}
        self._settled: dict[ActivityKey, ActivityRecord] = {}
        self._head: Any = None
        self._seeded = False
        self._noted: deque[ActivityKey] = deque()

    def note(self, key: ActivityKey) -> None:
        """An Activity of this world the daemon knows of (submitted, or reporting progress):
        shown even if it settled between two syncs, before any projection saw it (any
        thread)."""
        self._noted.append(key)

    def _seed(self, host: Host) -> None:
        latest: deque[ActivityRecord] = deque(maxlen=SETTLED_SEED)
        for record in host.catalog.iter_compactable(0):
            if record.key.world_id == self.world:
                latest.append(record)
        for record in latest:
            self._keys[record.key] = None
            self._settled[record.key] = record

    def _project(self, host: Host) -> None:
        from tether.activities import ActivityKey
        from tether.world import WorldNotFound

        try:
            head = host.head(self.world)
        except WorldNotFound:
            return
        if head == self._head:
            return
        snapshot = host.snapshot(self.world)
        for family in self._families():
            for request in family.project(snapshot):
                self._keys.setdefault(ActivityKey(self.world, request.kind, request.activity_id))
        self._head = head

    def __call__(self) -> list[ActivityRecord]:
        host = self._runtime()
        if host is None:
            return []
        if not self._seeded:
            self._seed(host)
            self._seeded = True
        self._project(host)
        while self._noted:
            self._keys.setdefault(self._noted.popleft(), None)
        out = []
        for key in self._keys:
            record = self._settled.get(key)
            if record is None:
                record = host.get(key)
                if record is None:
                    continue  # projected, not admitted yet: the projector admits it
                if record.settlement is not None:
                    self._settled[key] = record
            out.append(record)
        if len(self._settled) > SETTLED_SEED + SETTLED_KEPT:
            gone = self._oldest_turns(out, len(self._settled) - SETTLED_SEED)
            out = [r for r in out if r.key not in gone]
        return out

    def _oldest_turns(self, records: list[ActivityRecord], n: int) -> set[ActivityKey]:
        """Let go of at least `n` settled records, the oldest settled turns first, whole
        turns only (a turn with an unsettled record stays whole); the keys let go."""
        from tether.activities import Receipt

        turns: dict[Receipt, list[ActivityRecord]] = {}
        for r in records:
            turns.setdefault(r.source, []).append(r)
        done = [recs for recs in turns.values() if all(r.settlement is not None for r in recs)]
        done.sort(key=lambda recs: max(r.settlement.settled_at_ms for r in recs if r.settlement))
        gone: set[ActivityKey] = set()
        for recs in done:
            if len(gone) >= n:
                break
            for r in recs:
                gone.add(r.key)
                self._keys.pop(r.key, None)
                self._settled.pop(r.key, None)
        return gone


class _Journals:
    """Each family's operations journal under the data dir (`JOURNALS`)."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._open: dict[str, Journal] = {}

    def operation(self, record: ActivityRecord) -> Operation | None:
        from tether.operations import Journal, JournalError

        if record.operation_id is None:
            return None
        sub = next((d for p, d in JOURNALS.items() if record.key.kind.startswith(p)), None)
        if sub is None:
            return None
        journal = self._open.get(sub)
        if journal is None:
            journal = self._open[sub] = Journal(self._data_dir / sub)
        try:
            return journal.get(record.operation_id)
        except (JournalError, OSError):
            return None


def _world_name(name: str) -> str:
    from tether.world import InvalidWrite
    from tether.world._types import check_name

    try:
        return check_name("world", name, slash=False)
    except InvalidWrite as exc:
        raise LiveMountError("bad_request", str(exc)) from None


class LiveMount:
    """The daemon's live endpoint (see the module rules). Built by `Daemon.start`, closed by
    `Daemon.close`.

    Args:
        config: the daemon's host configuration (its `[tls]` and principals).
        address: where to listen (`[serve] live`).
        origins: the browser Origins accepted (`[serve] live_origins`).
        data_dir: the daemon's data dir (the families' journals).
        runtime: the daemon's runtime Host once it runs (None before).
        families: the served families (their projections name a world's Activities).

    Raises:
        ListenerError: `insecure_listener` (off loopback without `[tls]`) or an unusable TLS
            key or certificate, before any socket is opened.
        LiveMountError: `live_unavailable`, the address cannot be bound.
    """

    def __init__(
        self,
        config: Any,
        address: tuple[str, int],
        origins: Sequence[str],
        data_dir: Path,
        runtime: Callable[[], Host | None],
        families: Callable[[], Sequence[Family]],
    ) -> None:
        from tether._listen import ListenerPolicy
        from tether.live.ws import LiveServer

        self.authenticator = config.authenticator()
        self.policy = ListenerPolicy(
            address, config.tls, self.authenticator, require_principal=True
        )
        self.session_check: SessionCheck | None = None
        """The console's session-cookie check (None: a cookie is no credential here)."""
        self._data_dir = data_dir
        self._runtime = runtime
        self._families = families
        self._journals = _Journals(data_dir)
        self._records: dict[str, _WorldRecords] = {}
        host, port = address
        try:
            self.server: LiveServer = LiveServer(
                None,
                host,
                port,
                authorize=self.authorize,
                allowed_origins=[*origins, None],
                window=WINDOW,
                buffer_bytes=BUFFER_BYTES,
                path="/live",
                heartbeat_s=HEARTBEAT_S,
                sync_s=SYNC_S,
                sources=self,
                max_channels=MAX_FEEDS,
                max_per_principal=MAX_PER_PRINCIPAL,
                idle_s=IDLE_S,
                ssl=self.policy.ssl_context,
            )
        except OSError as exc:
            shown = address_text(host, port)
            raise LiveMountError(
                "live_unavailable",
                f"cannot serve the live endpoint on {shown}: {exc.strerror or exc}",
                details={"address": shown},
            ) from None
        self.url = self.server.url
        """The endpoint's base URL; a world is at ``<url>/<world>``."""

    # --- LiveSources ---

    def open(self, name: str) -> LiveFeed:
        from tether.live import LiveFeed
        from tether.live.ws import LiveRefused

        try:
            world = _world_name(name)
        except LiveMountError as exc:
            raise LiveRefused(404, exc.message, code="bad_request") from None
        if self._runtime() is None:
            raise LiveRefused(503, "the daemon is still starting", {"Retry-After": "1"})
        records = _WorldRecords(world, self._runtime, self._families)
        feed = LiveFeed(WORKSPACE, world, records, self._journals.operation)
        self._records[world] = records
        log.info("live feed opened", extra={"world": world, "epoch": feed.epoch})
        return feed

    def close(self, name: str, source: Any) -> None:
        self._records.pop(name, None)
        log.info("live feed closed", extra={"world": name})

    def note(self, key: ActivityKey) -> None:
        """The daemon knows of Activity `key` (it submitted it, or it reports progress): its
        world's open feed shows it even when it settles between two syncs (a projection sees
        only the Activities whose intents are unobserved at the head it reads)."""
        records = self._records.get(key.world_id)
        if records is not None:
            records.note(key)

    # --- auth ---

    def authorize(self, creds: LiveCredentials) -> str | None:
        """The principal of a connection (see the module rules: Auth); refusals raise
        `LiveRefused` with their status."""
        from tether._listen import REFUSALS, Refusal
        from tether.devices.credentials import CredentialError, roles_for
        from tether.live.ws import LiveRefused

        peer = creds.peer[0] if isinstance(creds.peer, tuple) else str(creds.peer or "unknown")
        if creds.token is None:
            check = self.session_check
            if creds.cookies and check is not None:
                principal = check(creds.cookies)
                if principal is not None:
                    return principal
                refusal = Refusal("credential_refused", "the console session is not valid")
            else:
                refusal = Refusal(
                    "principal_required",
                    "the live endpoint requires a principal: send `Authorization: Bearer "
                    "<token>`, or the subprotocols tether.live.v1 and tether.bearer.<token>",
                )
        else:
            try:
                found = self.authenticator.authenticate(
                    creds.token, roles=roles_for("read"), source=f"net:{peer}"
                )
                return str(found.name)
            except CredentialError as exc:
                code = exc.code if exc.code in REFUSALS else "credential_refused"
                retry = {k: v for k, v in exc.details.items() if k == "retry_after_s"}
                refusal = Refusal(code, exc.message, **retry)
        log.info("live connection refused", extra={"code": refusal.code, "peer": peer})
        raise LiveRefused(
            refusal.status, f"{refusal.code}: {refusal.message}", refusal.headers, refusal.code
        )

    # --- the control op ---

    def canonical(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """``live_canonical {world}``: the world feed's canonical record and its position."""
        from tether.live import LiveFeed
        from tether.live.ws import LiveRefused

        name = request.get("world")
        if not isinstance(name, str) or not name:
            raise LiveMountError("bad_request", "`world` must be a non-empty string")
        world = _world_name(name)
        try:
            feed = self.server.channel(world)
        except LiveRefused as exc:
            raise LiveMountError(exc.code or "live_unavailable", exc.text) from None
        assert isinstance(feed, LiveFeed)
        canon = feed.canonical()
        return {
            "workspace_id": WORKSPACE,
            "world": world,
            "epoch": canon.epoch,
            "seq": canon.seq,
            "record": canon.record,
        }

    def url_for(self, world: str) -> str:
        return self.server.url_for(world)

    def shutdown(self) -> None:
        """Close every connection and feed, release the port."""
        self.server.close()


__all__ = [
    "CODES",
    "DEFAULT_LIVE",
    "IDLE_S",
    "JOURNALS",
    "LIVE_CODES",
    "LIVE_KEYS",
    "MAX_FEEDS",
    "MAX_PER_PRINCIPAL",
    "WORKSPACE",
    "LiveMount",
    "LiveMountError",
    "SessionCheck",
    "check_origin",
    "parse_live",
]
