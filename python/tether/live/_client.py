"""The consumer side of the live transport: a WebSocket client that applies frames to the Rust
overlay and re-reads the canonical state whenever the subscriber says so.

`LiveClient` keeps one `LiveSubscriber` (sequence, gap, duplicate, reorder and epoch checks)
and one `LiveOverlay` (the optimistic view) across reconnections:

- every frame goes through the subscriber, its deliveries into the overlay;
- when the subscriber (a gap, an epoch change, a discontinuity) or the overlay (an entry marked
  for reconciliation) needs it, ``reread()`` gives the canonical record with its position
  (`Canonical`: epoch, seq), the overlay reconciles with it and the frames kept after that
  position are applied on top (`LiveSubscriber.resync`);
- a close with 4001 (resume unavailable) re-reads and reconnects from the read's position; a
  close with 1013 (too slow) or a lost connection reconnects from the last seq (the server's
  window replays what was missed, or answers 4001).

``reread`` is the daemon's canonical read (``live_canonical`` over its control socket:
`LiveClient.for_daemon` builds a client of a running `tether serve` that way); any callable
returning a `Canonical` will do (a test passes `LiveFeed.canonical`). It runs in a worker
thread. `run` retries what `transient` accepts (the server away, or restarting) with a
backoff, and raises any other failure (a refused credential).
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from tether._core import FrameOutcome, LiveOverlay, LiveSubscriber
from tether.live._feed import Canonical
from tether.live.ws import (
    CLOSE_RESUME_UNAVAILABLE,
    CLOSE_TOO_SLOW,
    LIVE_SUBPROTOCOL,
    TOKEN_SUBPROTOCOL_PREFIX,
    client_log,
)

if TYPE_CHECKING:
    from tether.client import Client

#: A daemon's answers (`ClientError` codes) while it restarts: `for_daemon`'s `run` retries.
DAEMON_AWAY = frozenset(
    {"daemon_not_running", "owner_no_answer", "daemon_starting", "live_busy", "live_unavailable"}
)

__all__ = ["LiveClient", "transient_failure"]


#: The largest frame a client takes (a publisher packs up to 64 deliveries in one, each up to
#: a 128 KiB chunk of output): a larger one closes the connection (1009) and `run` re-reads.
MAX_FRAME_BYTES = 16 * 1024 * 1024
#: RFC 6455's close code of a message past the receiver's limit.
CLOSE_MESSAGE_TOO_BIG = 1009

#: The longest `Retry-After` `LiveClient.run` waits out at once (a longer one is waited in
#: steps of this, each a new attempt).
MAX_RETRY_AFTER_S = 300.0


def transient_failure(exc: BaseException) -> bool:
    """Whether a failure of a connection attempt is worth retrying: the server is away (a
    refused or lost connection, a timeout, a handshake cut short), answered 503, or 429 (too
    many failed credentials from this address, or too many connections of this principal:
    retried after its ``Retry-After``)."""
    if isinstance(exc, InvalidStatus):
        return exc.response.status_code in (429, 503)
    return isinstance(exc, OSError | TimeoutError | InvalidHandshake)


def retry_after_s(exc: BaseException) -> float | None:
    """The seconds a refusal's ``Retry-After`` asks to wait (its delay-seconds form; at most
    `MAX_RETRY_AFTER_S`), or None when it has none."""
    if not isinstance(exc, InvalidStatus):
        return None
    value = exc.response.headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None or seconds != seconds:  # absent, or NaN
        return None
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


class LiveClient:
    """One session's live view over WebSocket (see the module docstring).

    Args:
        url: the server's ``ws://`` endpoint (no query: the client adds its resume position).
        reread: the canonical record and its position.
        workspace_id, agent_session_id: the session the overlay holds.
        token: a bearer token, sent as ``token_via`` (``header`` or ``subprotocol``).
        origin: the ``Origin`` header to send (None: none).
        headers: more request headers (a ``Cookie`` for the console's session, say).
        window: the subscriber's window of remembered seqs.
        ssl: the client TLS context for a ``wss://`` URL (None: the system's defaults).
        transient: which failures `run` retries (default `transient_failure`).
    """

    def __init__(
        self,
        url: str,
        reread: Callable[[], Canonical],
        *,
        workspace_id: str,
        agent_session_id: str,
        token: str | None = None,
        token_via: str = "header",
        origin: str | None = None,
        headers: dict[str, str] | None = None,
        window: int = 1024,
        ssl: _ssl.SSLContext | None = None,
        transient: Callable[[BaseException], bool] | None = None,
        locate: Callable[[], str] | None = None,
    ) -> None:
        if token_via not in ("header", "subprotocol"):
            raise ValueError(f"token_via must be 'header' or 'subprotocol', got {token_via!r}")
        if "?" in url:
            raise ValueError("the URL carries no query: the client adds epoch and seq itself")
        self.url = url
        self.reread = reread
        """The canonical read (replaceable: a reconnect to another daemon)."""
        self._locate = locate
        self._relocate = False  # a transient failure: `locate` the URL again before connecting
        self._token = token
        self._token_via = token_via
        self._origin = origin
        self._headers = dict(headers or {})
        self._window = window
        self._ssl = ssl
        self._transient = transient or transient_failure
        self.retries: Counter[str] = Counter()
        """Every failure `run` retried, by exception class."""
        self.overlay = LiveOverlay(workspace_id, agent_session_id)
        self.subscriber = LiveSubscriber(window=window)
        self.conn: ClientConnection | None = None
        self.faults: Counter[str] = Counter()
        """Every fault the subscriber reported, by kind."""
        self.closes: Counter[int] = Counter()
        """Every close code the server sent, by code."""
        self.rereads = 0
        self.frames = 0
        self._position: tuple[int, int] | None = None

    @classmethod
    def for_daemon(
        cls,
        client: Client,
        world: str,
        *,
        token: str | None = None,
        token_via: str = "header",
        origin: str | None = None,
        ssl: _ssl.SSLContext | None = None,
        window: int = 1024,
    ) -> LiveClient:
        """A client of `world` on the running daemon `client` reaches: the URL from its lock
        record (``<live>/<world>``), the canonical re-read through its control socket
        (`Client.live_canonical`).

        Raises:
            ClientError: no daemon runs (`daemon_not_running`), or it serves no live endpoint
                (`live_off`).
        """
        from tether.client import ClientError

        record = client.wait_ready(timeout=client.timeout)
        base = record.get("live")
        if not isinstance(base, str):
            raise ClientError(
                "live_off", 'the daemon serves no live endpoint ([serve] live = "off")'
            )

        def reread() -> Canonical:
            doc = client.live_canonical(world)
            return Canonical(int(doc["epoch"]), int(doc["seq"]), doc["record"])

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, ClientError):
                return exc.code in DAEMON_AWAY
            return transient_failure(exc)

        def url(base: str) -> str:
            return f"{base}/{quote(world, safe=':@+')}"  # as `LiveServer.url_for` quotes it

        def locate() -> str:
            # A restarted daemon may serve live on another port (`live = "HOST:0"`): its lock
            # record names the one it serves now.
            now = client.request({"op": "ping"}).get("live")
            if not isinstance(now, str):  # still starting its listeners: asked again
                raise ClientError(
                    "live_unavailable", "the daemon serves no live endpoint now; asking again"
                )
            return url(now)

        first = client.live_canonical(world)  # the session's identity (opens the feed)
        return cls(
            url(base),
            reread,
            workspace_id=str(first["workspace_id"]),
            agent_session_id=str(first["record"]["agentSessionId"]),
            token=token,
            token_via=token_via,
            origin=origin,
            window=window,
            ssl=ssl,
            transient=transient,
            locate=locate,
        )

    @property
    def position(self) -> tuple[int, int] | None:
        """(epoch, seq) the overlay holds everything up to, None before the first read."""
        return self._position

    def _resume_url(self) -> str:
        if self._position is None:
            return self.url
        epoch, seq = self._position
        return f"{self.url}?epoch={epoch}&seq={seq}"

    async def connect(self) -> None:
        """Open the connection, resuming from the position held (a refusal raises
        `websockets.exceptions.InvalidStatus` with the server's HTTP status)."""
        headers = dict(self._headers)
        subprotocols: list[Subprotocol] = [Subprotocol(LIVE_SUBPROTOCOL)]
        if self._token is not None:
            if self._token_via == "header":
                headers["Authorization"] = f"Bearer {self._token}"
            else:
                subprotocols.append(Subprotocol(TOKEN_SUBPROTOCOL_PREFIX + self._token))
        extra: dict[str, Any] = {} if self._ssl is None else {"ssl": self._ssl}
        self.conn = await connect(
            self._resume_url(),
            origin=None if self._origin is None else self._origin,  # type: ignore[arg-type]
            subprotocols=subprotocols,
            additional_headers=headers,
            compression=None,
            max_size=MAX_FRAME_BYTES,
            proxy=None,
            logger=client_log,
            **extra,
        )

    async def reconcile(self) -> None:
        """Re-read the canonical state and reconcile the overlay with it."""
        canon = await asyncio.to_thread(self.reread)
        self.apply_canonical(canon)

    def apply_canonical(self, canon: Canonical) -> None:
        """Reconcile the overlay with a canonical record read at (epoch, seq)."""
        self.rereads += 1
        sub = self.subscriber
        if sub.epoch is not None and sub.epoch != canon.epoch:
            # The stream and the read are of different publisher runs: start over at the read.
            self.subscriber = sub = LiveSubscriber(epoch=None, window=self._window)
        replay = sub.resync(canon.epoch, canon.seq)
        self.overlay.reconcile(canon.record, replay=replay)
        self._position = (canon.epoch, max(canon.seq, sub.last_seq))

    def handle(self, frame: bytes) -> FrameOutcome:
        """Apply one frame (no re-read: see `receive`)."""
        outcome = self.subscriber.handle_frame(frame)
        self.frames += 1
        if outcome.fault is not None:
            self.faults[outcome.fault] += 1
        self.overlay.apply_outcome(outcome)
        sub = self.subscriber
        if not sub.needs_reread and sub.epoch is not None:
            self._position = (sub.epoch, sub.last_seq)
        return outcome

    @property
    def needs_reread(self) -> bool:
        return self.subscriber.needs_reread or self.overlay.needs_reconciliation

    async def receive(self, timeout: float | None = None) -> FrameOutcome:
        """Receive and apply one frame, re-reading when needed.

        Raises:
            ConnectionClosed: the connection ended (its code is counted in `closes`).
            TimeoutError: no frame within `timeout` seconds.
        """
        assert self.conn is not None, "connect() first"
        try:
            data = await asyncio.wait_for(self.conn.recv(decode=False), timeout)
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                self.closes[exc.rcvd.code] += 1
            raise
        outcome = self.handle(data if isinstance(data, bytes) else data.encode())
        if self.needs_reread:
            await self.reconcile()
        return outcome

    async def run(
        self, stop: asyncio.Event, *, retry_s: float = 0.05, max_retry_s: float = 2.0
    ) -> None:
        """Receive until `stop` is set, reconnecting (and re-reading) as the rules say. A
        failure `transient` accepts (the server away: the connection refused, a 503, a lost
        handshake; a 429; for `for_daemon` also a daemon that is restarting) is retried after a
        backoff from `retry_s` to `max_retry_s`, or after the refusal's ``Retry-After`` when it
        asks for longer (`retry_after_s`); any other one is raised. After such a failure the
        URL is located again first where the client has a ``locate`` (`for_daemon`: the
        daemon's record, so a daemon restarted on another port is found)."""
        delay = retry_s
        reread_due = False
        while not stop.is_set():
            try:
                if reread_due or self.needs_reread:
                    await self.reconcile()
                    reread_due = False
                if self.conn is None:
                    if self._relocate and self._locate is not None:
                        self.url = await asyncio.to_thread(self._locate)
                    self._relocate = False
                    await self.connect()
                recv = asyncio.ensure_future(self.receive())
                halt = asyncio.ensure_future(stop.wait())
                await asyncio.wait({recv, halt}, return_when=asyncio.FIRST_COMPLETED)
                if not recv.done():
                    recv.cancel()
                    halt.cancel()
                    break
                halt.cancel()
                recv.result()
                delay = retry_s
            except ConnectionClosed as exc:
                self.conn = None
                code = exc.rcvd.code if exc.rcvd is not None else None
                sent = exc.sent.code if exc.sent is not None else None
                if code == CLOSE_RESUME_UNAVAILABLE or CLOSE_MESSAGE_TOO_BIG in (code, sent):
                    # A frame past `MAX_FRAME_BYTES` would come again at the same resume
                    # point, for ever: the canonical re-read carries what it held, and the
                    # stream resumes after it.
                    reread_due = True
                elif code != CLOSE_TOO_SLOW:
                    await self._pause(stop, retry_s)
            except Exception as exc:
                if not self._transient(exc):
                    raise
                self._relocate = True  # the server away: where it serves may have changed
                self.retries[type(exc).__name__] += 1
                asked = retry_after_s(exc)
                await self._pause(stop, delay if asked is None else max(delay, asked))
                delay = min(max_retry_s, delay * 2)
        await self.close()

    @staticmethod
    async def _pause(stop: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            pass

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    def snapshot(self) -> dict[str, Any]:
        """The overlay in the canonical record's form."""
        return self.overlay.snapshot()
