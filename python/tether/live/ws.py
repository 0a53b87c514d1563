"""The live-event transport: a WebSocket server of one session's frames (`websockets`, asyncio,
in its own thread), for `tether serve` to mount.

Rules, all here:

- **Frames.** Every message is one text frame ``{epoch, seq, deliveries: [{kind, payload}]}``
  (``kind`` ``event`` or ``discontinuity``), exactly as the Rust framer made it, in seq order.
  The epoch is the source's (`LiveFeed`: random per daemon start, so a restart is an epoch
  change). An idle source still sends a heartbeat frame every `heartbeat_s`, so a subscriber
  also sees a loss at the end of a burst.
- **Resume.** ``ws://host:port/live?epoch=E&seq=S`` asks for the frames after S of epoch E. The
  server keeps the last `window` frames; when all frames after S are in it, they are sent, then
  live ones. Otherwise (another epoch, S older than the window or newer than the last frame)
  the connection is closed at once with code **4001** (`CLOSE_RESUME_UNAVAILABLE`): the client
  re-reads the canonical state (which gives its position) and reconnects from there. Without
  ``epoch``/``seq`` a subscriber starts live with the next frame (its first frame is an epoch
  change to it: it re-reads).
- **Slow consumers.** A frame is written to every subscriber at once (one encoding, no task
  per subscriber); what a subscriber has not taken yet waits in its connection's buffer,
  bounded by `buffer_bytes`. Publishing never waits: a subscriber over the bound is closed
  with **1013** (try again later) and gets no more frames; it reconnects with its last seq
  (resume).
- **Auth.** A token in the ``Authorization: Bearer <token>`` header or in a subprotocol
  ``tether.bearer.<token>`` (a browser cannot set headers; the server selects ``tether.live.v1``,
  never echoing the token), or the console's session cookie: `authorize` gets the
  `LiveCredentials` and returns the principal, or None to refuse (HTTP 401). The ``Origin``
  must be in `allowed_origins` (None in the list admits a request without one: a non-browser
  client) or the request is refused (403). Nothing but ``epoch`` and ``seq`` may be in the
  URL: a token there (or any other parameter) is refused (400), the token never being read.
"""

from __future__ import annotations

import asyncio
import http
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from tether.live._feed import FrameSink

__all__ = [
    "CLOSE_RESUME_UNAVAILABLE",
    "CLOSE_TOO_SLOW",
    "LIVE_SUBPROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "LiveCredentials",
    "LiveServer",
    "LiveSourceLike",
]

#: Close code of a resume the window cannot serve: re-read the canonical state, reconnect.
CLOSE_RESUME_UNAVAILABLE: Final = 4001
#: Close code of a subscriber too slow for its buffer (RFC 6455 "try again later").
CLOSE_TOO_SLOW: Final = 1013
LIVE_SUBPROTOCOL: Final = "tether.live.v1"
TOKEN_SUBPROTOCOL_PREFIX: Final = "tether.bearer."
RESUME_PARAMS: Final = frozenset({"epoch", "seq"})

log = logging.getLogger("tether.live.ws")


class LiveSourceLike(Protocol):
    """What the server needs of its source (`LiveFeed`, `PublisherSource`)."""

    @property
    def epoch(self) -> int: ...

    @property
    def seq(self) -> int: ...

    def attach(self, sink: FrameSink) -> None: ...

    def detach(self, sink: FrameSink) -> None: ...

    def sync(self) -> int: ...

    def heartbeat(self) -> None: ...


@dataclass(frozen=True)
class LiveCredentials:
    """What a connecting client presented: the bearer token (header or subprotocol, None when
    neither), where it came from (``header``, ``subprotocol`` or None), the cookies, the
    ``Origin`` and the peer address."""

    token: str | None
    token_from: str | None
    cookies: dict[str, str]
    origin: str | None
    peer: Any


@dataclass(eq=False)
class _Subscriber:
    conn: ServerConnection
    dropped: bool = False


def _refuse(conn: ServerConnection, status: http.HTTPStatus, text: str) -> Response:
    return conn.respond(status, text + "\n")


def _credentials(conn: ServerConnection, headers: Headers) -> LiveCredentials | str:
    """The credentials of a request, or why they are malformed."""
    token: str | None = None
    token_from: str | None = None
    auth = headers.get_all("Authorization")
    if len(auth) > 1:
        return "more than one Authorization header"
    if auth:
        scheme, _, value = auth[0].partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return "the Authorization header must be 'Bearer <token>'"
        token, token_from = value.strip(), "header"
    offered = [p.strip() for h in headers.get_all("Sec-WebSocket-Protocol") for p in h.split(",")]
    bearers = [
        p[len(TOKEN_SUBPROTOCOL_PREFIX) :]
        for p in offered
        if p.startswith(TOKEN_SUBPROTOCOL_PREFIX)
    ]
    if len(bearers) > 1 or (bearers and token is not None):
        return "more than one token offered"
    if bearers:
        if not bearers[0]:
            return "an empty token subprotocol"
        token, token_from = bearers[0], "subprotocol"
    cookies: dict[str, str] = {}
    for h in headers.get_all("Cookie"):
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(h)
        except CookieError:
            return "a malformed Cookie header"
        cookies.update({k: m.value for k, m in jar.items()})
    return LiveCredentials(token, token_from, cookies, headers.get("Origin"), conn.remote_address)


def _resume(path: str) -> tuple[int, int] | str | None:
    """The (epoch, seq) a request resumes from, None for a live start, or why it is refused."""
    query = urlsplit(path).query
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        return "a malformed query string"
    names = [k for k, _ in pairs]
    extra = sorted(set(names) - RESUME_PARAMS)
    if extra:
        return (
            f"the URL may carry only epoch and seq, not {', '.join(extra)}: a token goes in the "
            "Authorization header or a subprotocol, never in the URL"
        )
    if len(names) != len(set(names)):
        return "epoch and seq may each appear once"
    values = dict(pairs)
    if not values:
        return None
    if set(values) != RESUME_PARAMS:
        return "a resume needs both epoch and seq"
    if not all(v.isascii() and v.isdigit() and len(v) <= 18 for v in values.values()):
        return "epoch and seq are non-negative integers"
    return int(values["epoch"]), int(values["seq"])


class LiveServer:
    """One session's frames over WebSocket (see the module rules).

    Args:
        source: where the frames come from; the server attaches itself as a sink.
        host, port: where to listen (port 0: any free one; see `url`).
        authorize: the principal for a client's credentials, or None to refuse it.
        allowed_origins: the ``Origin`` values accepted (None admits a request without one).
        window: how many recent frames are kept for resuming subscribers.
        buffer_bytes: how many bytes may wait to be sent to one subscriber (beyond what the
            kernel's socket buffers hold) before it is closed with 1013.
        path: the endpoint's path.
        heartbeat_s: an idle source gets a heartbeat frame this often (None: never).
        sync_s: the source is synced this often from the server's pump thread (None: the
            caller syncs it).
    """

    def __init__(
        self,
        source: LiveSourceLike,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        authorize: Callable[[LiveCredentials], str | None],
        allowed_origins: Sequence[str | None],
        window: int = 4096,
        buffer_bytes: int = 4 * 1024 * 1024,
        path: str = "/live",
        heartbeat_s: float | None = 1.0,
        sync_s: float | None = None,
    ) -> None:
        for name, value in (("window", window), ("buffer_bytes", buffer_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, t in (("heartbeat_s", heartbeat_s), ("sync_s", sync_s)):
            if t is not None and (isinstance(t, bool) or not 0 < t < float("inf")):
                raise ValueError(f"{name} must be > 0 seconds or None, got {t!r}")
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        self.source = source
        self.epoch = int(source.epoch)
        self.window = window
        self.buffer_bytes = buffer_bytes
        self._closing: set[asyncio.Future[None]] = set()
        self.path = path
        self._authorize = authorize
        self._origins = list(allowed_origins)
        self._heartbeat_s = heartbeat_s
        self._sync_s = sync_s
        self._frames: deque[tuple[int, bytes]] = deque(maxlen=window)
        self._subs: set[_Subscriber] = set()
        self._last_frame = time.monotonic()
        self.dropped = 0
        """How many subscribers were closed with 1013 so far."""
        self.sent = 0
        """How many frame writes (frames times subscribers) were made so far."""
        self._stop = threading.Event()
        self._attached = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._server: Server | None = None
        started = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run,
            args=(host, port, started, failure),
            name="tether-live-ws",
            daemon=True,
        )
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        self._last_seq = 0
        self._loop.call_soon_threadsafe(self._attach)
        self._attached.wait()
        self._pump: threading.Thread | None = None
        if heartbeat_s is not None or sync_s is not None:
            self._pump = threading.Thread(
                target=self._pump_loop, name="tether-live-pump", daemon=True
            )
            self._pump.start()

    # --- the loop thread ---

    def _run(
        self, host: str, port: int, started: threading.Event, failure: list[BaseException]
    ) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(self._start(host, port))
        except BaseException as exc:  # the constructor re-raises it
            failure.append(exc)
            started.set()
            self._loop.close()
            return
        started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _start(self, host: str, port: int) -> Server:
        return await serve(
            self._handle,
            host,
            port,
            process_request=self._process_request,
            select_subprotocol=self._select_subprotocol,
            compression=None,
            max_size=64 * 1024,
            max_queue=4,
            logger=log,
        )

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if urlsplit(request.path).path != self.path:
            return _refuse(conn, http.HTTPStatus.NOT_FOUND, f"the live endpoint is {self.path}")
        resume = _resume(request.path)
        if isinstance(resume, str):
            return _refuse(conn, http.HTTPStatus.BAD_REQUEST, resume)
        origin = request.headers.get("Origin")
        if origin not in self._origins:
            why = "a request without Origin" if origin is None else f"Origin {origin}"
            return _refuse(conn, http.HTTPStatus.FORBIDDEN, f"{why} is not allowed")
        creds = _credentials(conn, request.headers)
        if isinstance(creds, str):
            return _refuse(conn, http.HTTPStatus.BAD_REQUEST, creds)
        if self._authorize(creds) is None:
            return _refuse(conn, http.HTTPStatus.UNAUTHORIZED, "not authorized")
        return None

    def _select_subprotocol(
        self, conn: ServerConnection, subprotocols: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        return Subprotocol(LIVE_SUBPROTOCOL) if LIVE_SUBPROTOCOL in subprotocols else None

    async def _handle(self, conn: ServerConnection) -> None:
        assert conn.request is not None
        resume = _resume(conn.request.path)
        sub = _Subscriber(conn)
        if isinstance(resume, tuple):
            epoch, seq = resume
            last = self._last_seq
            first = self._frames[0][0] if self._frames else last + 1
            if epoch != self.epoch or seq > last or seq + 1 < first:
                await conn.close(
                    CLOSE_RESUME_UNAVAILABLE, "resume unavailable: re-read the canonical state"
                )
                return
            # No await from here until it is subscribed: no frame can fall in between.
            for s, frame in self._frames:
                if s > seq:
                    broadcast([conn], frame, text=True)
            self._check(sub)
        if not sub.dropped:
            self._subs.add(sub)
        try:
            await conn.wait_closed()
        finally:
            self._subs.discard(sub)

    def _check(self, sub: _Subscriber) -> None:
        """Close a subscriber whose unsent bytes went over the bound (1013)."""
        transport = sub.conn.transport
        if transport is not None and transport.get_write_buffer_size() > self.buffer_bytes:
            sub.dropped = True
            self._subs.discard(sub)
            self.dropped += 1
            # The close frame goes after what is buffered; a peer that never reads is cut off
            # after the close timeout.
            task = asyncio.ensure_future(
                sub.conn.close(CLOSE_TOO_SLOW, "subscriber fell behind: resume from the last seq")
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _attach(self) -> None:
        # On the loop: the source's position and its later frames, with nothing in between.
        self.source.attach(self.publish)
        self._last_seq = int(self.source.seq)
        self._attached.set()

    def _fanout(self, frame: bytes, seq: int) -> None:
        self._frames.append((seq, frame))
        self._last_seq = seq
        subs = list(self._subs)
        broadcast([s.conn for s in subs], frame, text=True)
        self.sent += len(subs)
        for sub in subs:
            self._check(sub)

    # --- any thread ---

    def publish(self, frame: bytes, seq: int) -> None:
        """Send one frame (the source's sink; thread-safe, never waits)."""
        self._last_frame = time.monotonic()
        try:
            self._loop.call_soon_threadsafe(self._fanout, frame, seq)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    def _pump_loop(self) -> None:
        period = min(t for t in (self._heartbeat_s, self._sync_s) if t is not None)
        while not self._stop.wait(period):
            try:
                if self._sync_s is not None:
                    self.source.sync()
                if (
                    self._heartbeat_s is not None
                    and time.monotonic() - self._last_frame >= self._heartbeat_s
                ):
                    self.source.heartbeat()
            except Exception:  # a failed read is retried on the next period
                log.exception("live source sync failed")

    @property
    def port(self) -> int:
        assert self._server is not None
        sockets = list(self._server.sockets)
        return int(sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """The endpoint's ``ws://`` URL."""
        assert self._server is not None
        host = next(iter(self._server.sockets)).getsockname()[0]
        return f"ws://{host}:{self.port}{self.path}"

    @property
    def subscribers(self) -> int:
        """How many subscribers are connected."""
        return len(self._subs)

    def close(self) -> None:
        """Stop serving: close every connection (1001), release the port, stop the threads."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.source.detach(self.publish)
        if self._pump is not None:
            self._pump.join()

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
