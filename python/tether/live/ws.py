"""The live-event transport: a WebSocket server of live sessions' frames, one source or one per
channel (`websockets`, asyncio, in its own thread); `tether serve` mounts it
(`tether.serve.live_mount`).

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
  ``tether.bearer.<token>`` offered beside ``tether.live.v1`` (a browser cannot set headers; the
  server selects ``tether.live.v1``, never echoing the token; a token subprotocol offered
  without it is refused, 400, since a browser fails a handshake that selects none), or the
  console's session cookie: `authorize` gets the `LiveCredentials` and returns the
  principal, or None to refuse (HTTP 401). The ``Origin``
  must be in `allowed_origins` (None in the list admits a request without one: a non-browser
  client) or the request is refused (403). Nothing but ``epoch`` and ``seq`` may be in the
  URL: a token there (or any other parameter) is refused (400), the token never being read.
  With `ssl` (a server TLS context: the listener policy's) it is ``wss://``.
  `authorize` may also raise `LiveRefused` to answer another status (403 for a role, 429 with
  ``Retry-After`` while rate-limited); it runs in a worker thread (a slow hash never stalls the
  frames of the others).
- **Routing.** Given one `source`, the server serves it at `path`. Given `sources` (a
  `LiveSources`) instead, it serves one channel per name at ``<path>/<name>`` (the name
  percent-decoded; every ``/`` after the prefix is part of it): a channel's source is opened
  on its first use (a subscription, or `channel` for a canonical read beside the stream), its
  frames, window, epoch and subscribers are its own. At most `max_channels` are open; one with
  no subscriber for `idle_s` is closed (detached, then `LiveSources.close`), and opening one
  more than the bound closes the longest idle one first, or is refused (503) when every open
  channel has subscribers. A reopened channel is a new source with a new epoch: its
  subscribers see an epoch change and re-read.
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
from ssl import SSLContext
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from tether._listen import _host_is_loopback_name, secret_params
from tether._log import REDACTED
from tether.live._feed import FrameSink

__all__ = [
    "CLOSE_RESUME_UNAVAILABLE",
    "CLOSE_SESSION_ENDED",
    "CLOSE_TOO_SLOW",
    "LIVE_SUBPROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "LiveCredentials",
    "LiveRefused",
    "LiveServer",
    "LiveSourceLike",
    "LiveSources",
]

#: Close code of a resume the window cannot serve: re-read the canonical state, reconnect.
CLOSE_RESUME_UNAVAILABLE: Final = 4001
#: Close code of a subscriber too slow for its buffer (RFC 6455 "try again later").
CLOSE_TOO_SLOW: Final = 1013
#: Close code of a connection whose session cookie no longer names a session (logged out,
#: expired): RFC 6455's policy violation. Log in again, then reconnect.
CLOSE_SESSION_ENDED: Final = 1008
#: How often a connection admitted on a session cookie has its session checked again (s).
SESSION_CHECK_S: Final = 1.0
#: How long a connection's opening handshake may take, its credential check included (s).
OPEN_TIMEOUT_S = 10.0
#: The keepalive: a ping this often, and a connection whose pong does not come within it
#: closed (1011) (s).
KEEPALIVE_S = 20.0
LIVE_SUBPROTOCOL: Final = "tether.live.v1"
TOKEN_SUBPROTOCOL_PREFIX: Final = "tether.bearer."
RESUME_PARAMS: Final = frozenset({"epoch", "seq"})

log = logging.getLogger("tether.live.ws")
#: Header fields whose values carry a credential: never logged (see `HeaderCredentials`).
CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "sec-websocket-protocol"}
)


class HeaderCredentials(logging.Filter):
    """Masks credentials in the handshake headers websockets logs at DEBUG, one record per
    field (``"< %s: %s"`` received, ``"> %s: %s"`` sent, name and value as arguments): a
    bearer token, a session cookie, a token subprotocol. The daemon holds only their hashes,
    so the process's `tether._log` redactor cannot know them. A token subprotocol loses its
    token only (``tether.bearer.[REDACTED]``, the other offers stay); any other credential
    field its whole value."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and record.msg in _REQUEST_LINES:
            # The request line: a credential in its query (refused, `secret_in_url`, but
            # logged first) is masked with the rest of the query.
            at = _REQUEST_LINES[record.msg]
            if at < len(args):
                record.args = (*args[:at], _masked_target(str(args[at])), *args[at + 1 :])
            return True
        if (
            isinstance(args, tuple)
            and len(args) == 2
            and record.msg in ("< %s: %s", "> %s: %s")
            and str(args[0]).lower() in CREDENTIAL_HEADERS
        ):
            name, value = str(args[0]), str(args[1])
            if name.lower() == "sec-websocket-protocol":
                offers = [o.strip() for o in value.split(",")]
                value = ", ".join(
                    TOKEN_SUBPROTOCOL_PREFIX + REDACTED
                    if o.startswith(TOKEN_SUBPROTOCOL_PREFIX)
                    else o
                    for o in offers
                )
            else:
                value = REDACTED
            record.args = (name, value)
        return True


#: The request lines websockets logs at DEBUG, and the position of the target in their args.
_REQUEST_LINES: Final = {"< %s %s %s": 1, "< GET %s HTTP/1.1": 0, "> GET %s HTTP/1.1": 0}


def _masked_target(target: str) -> str:
    """``target`` with its query masked whole when a parameter of it names a secret (as
    `secret_in_url` refuses it: `secret_params`), else as it is."""
    return f"{target.partition('?')[0]}?{REDACTED}" if secret_params(target) else target


log.addFilter(HeaderCredentials())
#: The logger live clients hand websockets (its handshake headers masked as the server's).
client_log = logging.getLogger("tether.live.client")
client_log.addFilter(HeaderCredentials())


class LiveSourceLike(Protocol):
    """What the server needs of its source (`LiveFeed`, `PublisherSource`)."""

    @property
    def epoch(self) -> int: ...

    @property
    def seq(self) -> int: ...

    def attach(self, sink: FrameSink) -> int | None:
        """Send every later frame to `sink`; the seq as of attaching (None: read `seq`)."""
        ...

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


class LiveSources(Protocol):
    """The sources of a routed server, one per channel name."""

    def open(self, name: str) -> LiveSourceLike:
        """The source of channel `name` (raise `LiveRefused` for a name there is none of)."""
        ...

    def close(self, name: str, source: LiveSourceLike) -> None:
        """The channel was closed (idle, or the server stops): release what `open` made."""
        ...


class LiveRefused(Exception):
    """A request refused with an HTTP status, a one-line reason and response headers (raised
    by `authorize`, by `LiveSources.open`, or by the server itself)."""

    def __init__(
        self, status: int, text: str, headers: dict[str, str] | None = None, code: str = ""
    ) -> None:
        super().__init__(text)
        self.status = http.HTTPStatus(status)
        self.text = text
        self.headers = dict(headers or {})
        self.code = code


@dataclass(eq=False)
class _Subscriber:
    conn: ServerConnection
    dropped: bool = False


class _Channel:
    """One source's frames, window and subscribers (mutated on the server's loop only, but
    `last_used` and `closed`, which are under the server's channel lock)."""

    def __init__(self, server: LiveServer, name: str, source: LiveSourceLike) -> None:
        self.server = server
        self.name = name
        self.source = source
        self.epoch = int(source.epoch)
        self.frames: deque[tuple[int, bytes]] = deque(maxlen=server.window)
        self.subs: set[_Subscriber] = set()
        self.last_seq = 0
        self.last_frame = time.monotonic()
        self.last_used = time.monotonic()
        self.closed = False

    def attach(self) -> None:
        at = self.source.attach(self.publish)
        self.last_seq = int(self.source.seq if at is None else at)

    def publish(self, frame: bytes, seq: int) -> None:
        """The source's sink: thread-safe, never waits."""
        self.last_frame = time.monotonic()
        try:
            self.server._loop.call_soon_threadsafe(self.server._fanout, self, frame, seq)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass


def _refuse(
    conn: ServerConnection,
    status: http.HTTPStatus,
    text: str,
    headers: dict[str, str] | None = None,
) -> Response:
    response = conn.respond(status, text + "\n")
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


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
        if LIVE_SUBPROTOCOL not in offered:
            # The answer must select an offered subprotocol (a browser fails the handshake
            # otherwise), and the token's is never echoed: refused before the token is read.
            return (
                f"offer the subprotocol {LIVE_SUBPROTOCOL!r} beside the token's"
                f" ({LIVE_SUBPROTOCOL!r} is the one the server selects; the token's is never"
                " echoed)"
            )
        token, token_from = bearers[0], "subprotocol"
    cookies: dict[str, str] = {}
    for h in headers.get_all("Cookie"):
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(h)
        except CookieError:
            return "a malformed Cookie header"
        cookies.update({k: m.value for k, m in jar.items()})
    origin = next(iter(headers.get_all("Origin")), None)  # at most one: `_process_request`
    return LiveCredentials(token, token_from, cookies, origin, conn.remote_address)


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
    """Live frames over WebSocket: one source, or one channel per name (see the module rules).

    Args:
        source: where the frames come from (served at `path`); the server attaches itself
            as a sink. Give either this or `sources`.
        host, port: where to listen (port 0: any free one; see `url`).
        authorize: the principal for a client's credentials, or None to refuse it (401); it
            may raise `LiveRefused` for another status.
        allowed_origins: the ``Origin`` values accepted (None admits a request without one).
        window: how many recent frames each channel keeps for resuming subscribers.
        buffer_bytes: how many bytes may wait to be sent to one subscriber (beyond what the
            kernel's socket buffers hold) before it is closed with 1013.
        path: the endpoint's path (with `sources`: the prefix of ``<path>/<name>``).
        heartbeat_s: an idle source gets a heartbeat frame this often (None: never).
        sync_s: every open source is synced this often from the server's pump thread (None:
            the caller syncs it).
        sources: the sources of a routed server, opened per channel name on first use.
        max_channels: how many channels a routed server keeps open at most.
        idle_s: a routed channel without a subscriber this long is closed.
        ssl: a server TLS context (`wss://`); None serves plain ``ws://``.
        max_per_principal: how many connections one principal may hold open at once (None:
            no bound); one more is refused with 429 and ``Retry-After`` (`live_busy`), so no
            one credential can hold every channel of a routed server.
    """

    def __init__(
        self,
        source: LiveSourceLike | None = None,
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
        sources: LiveSources | None = None,
        max_channels: int = 64,
        idle_s: float = 60.0,
        ssl: SSLContext | None = None,
        max_per_principal: int | None = None,
    ) -> None:
        if (source is None) == (sources is None):
            raise ValueError("give exactly one of source or sources")
        for name, value in (
            ("window", window),
            ("buffer_bytes", buffer_bytes),
            ("max_channels", max_channels),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, t in (("heartbeat_s", heartbeat_s), ("sync_s", sync_s), ("idle_s", idle_s)):
            if t is not None and (isinstance(t, bool) or not 0 < t < float("inf")):
                raise ValueError(f"{name} must be > 0 seconds or None, got {t!r}")
        if not path.startswith("/") or (sources is not None and path.endswith("/")):
            raise ValueError(f"path must start with '/' (and not end with one), got {path!r}")
        self.source = source
        self.sources = sources
        self.window = window
        self.buffer_bytes = buffer_bytes
        self.max_channels = max_channels
        self.idle_s = idle_s
        self._closing: set[asyncio.Future[None]] = set()
        self.path = path
        #: Listening on loopback: only a loopback ``Host`` is answered (DNS rebinding).
        self._loopback = _host_is_loopback_name(host)
        self._authorize = authorize
        self._origins = list(allowed_origins)
        self._heartbeat_s = heartbeat_s
        self._sync_s = sync_s
        self._ssl = ssl
        self._channels: dict[str, _Channel] = {}
        self._channels_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self.dropped = 0
        """How many subscribers were closed with 1013 so far."""
        if max_per_principal is not None and (
            isinstance(max_per_principal, bool)
            or not isinstance(max_per_principal, int)
            or max_per_principal < 1
        ):
            raise ValueError(f"max_per_principal must be an int >= 1, got {max_per_principal!r}")
        self.max_per_principal = max_per_principal
        # Connections per principal: counted from its admission until the connection ends.
        self._held: dict[str, int] = {}
        self._releasing: set[asyncio.Future[None]] = set()
        # The connections admitted on a session cookie (no token): checked again while open.
        self._sessions: dict[ServerConnection, tuple[LiveCredentials, str]] = {}
        self.sent = 0
        """How many frame writes (frames times subscribers) were made so far."""
        self.opened = 0
        """How many channels were opened so far."""
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._server: Server | None = None
        self._single: _Channel | None = None
        if source is not None:
            # Before the loop runs: its position, then every later frame queued to the loop in
            # order, nothing between.
            self._single = _Channel(self, "", source)
            self._single.attach()
            self._channels[""] = self._single
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
            if self._single is not None:
                self._single.source.detach(self._single.publish)
            raise failure[0]
        self._pump: threading.Thread | None = None
        if heartbeat_s is not None or sync_s is not None or sources is not None:
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
            open_timeout=OPEN_TIMEOUT_S,
            ping_interval=KEEPALIVE_S,
            ping_timeout=KEEPALIVE_S,
            logger=log,
            ssl=self._ssl,
        )

    def _route(self, path: str) -> str | None:
        """The channel a request path names ("" for the single source), or None."""
        if self._single is not None:
            return "" if path == self.path else None
        prefix = self.path + "/"
        if not path.startswith(prefix) or len(path) == len(prefix):
            return None
        return unquote(path[len(prefix) :], errors="strict")

    async def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        try:
            name = self._route(urlsplit(request.path).path)
        except (UnicodeDecodeError, ValueError):  # ValueError: "//[x", a malformed authority
            name = None
        if name is None:
            where = self.path if self._single is not None else f"{self.path}/<name>"
            return _refuse(conn, http.HTTPStatus.NOT_FOUND, f"the live endpoint is {where}")
        resume = _resume(request.path)
        if isinstance(resume, str):
            return _refuse(conn, http.HTTPStatus.BAD_REQUEST, resume)
        hosts = request.headers.get_all("Host")
        if self._loopback and any(not _host_is_loopback_name(h) for h in hosts):
            # A page whose name was rebound to this loopback address: refused as every
            # loopback listener refuses it (`host_not_loopback`), credentials or not.
            return _refuse(
                conn,
                http.HTTPStatus.FORBIDDEN,
                "this listener is on loopback and answers only a loopback Host",
            )
        origins = request.headers.get_all("Origin")
        if len(origins) > 1:  # a browser sends one: which one to judge is not for us to guess
            return _refuse(conn, http.HTTPStatus.BAD_REQUEST, "more than one Origin header")
        origin = origins[0] if origins else None
        if origin not in self._origins:
            why = "a request without Origin" if origin is None else f"Origin {origin}"
            return _refuse(conn, http.HTTPStatus.FORBIDDEN, f"{why} is not allowed")
        creds = _credentials(conn, request.headers)
        if isinstance(creds, str):
            return _refuse(conn, http.HTTPStatus.BAD_REQUEST, creds)
        # In a worker thread: verifying a hash, or opening a source, never stalls frames.
        admitting = asyncio.ensure_future(asyncio.to_thread(self._admit, creds, name))
        try:
            principal = await asyncio.shield(admitting)
        except LiveRefused as exc:
            return _refuse(conn, exc.status, exc.text, exc.headers)
        except asyncio.CancelledError:
            # The handshake was given up (its `open_timeout`, a peer gone) while the thread
            # still admits: what it admits is given back once it has, or the principal's
            # count would keep a connection that never was, until it is refused for good.
            admitting.add_done_callback(self._release_unused)
            raise
        if creds.token is None:  # a session's cookie: the session may end before the socket
            self._sessions[conn] = (creds, principal)
        # Counted until the connection ends, however it ends (its handshake may still fail).
        task = asyncio.ensure_future(self._release_at_close(conn, principal))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)
        return None

    async def _release_at_close(self, conn: ServerConnection, principal: str) -> None:
        try:
            await conn.wait_closed()
        finally:
            self._sessions.pop(conn, None)
            self._release_principal(principal)

    async def _watch_session(
        self, conn: ServerConnection, creds: LiveCredentials, principal: str
    ) -> None:
        """Close a connection admitted on a session cookie once the cookie names no session
        of ``principal`` any more (a logout, an expiry): `CLOSE_SESSION_ENDED`. Checked every
        `SESSION_CHECK_S` (in a worker thread, as its admission was)."""
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            try:
                still = await asyncio.to_thread(self._authorize, creds)
            except LiveRefused:
                still = None
            except Exception:  # a check that fails closes, never keeps, the connection
                log.exception("live session check failed")
                still = None
            if still != principal:
                await conn.close(CLOSE_SESSION_ENDED, "the session ended: log in again")
                return

    def _admit(self, creds: LiveCredentials, name: str) -> str:
        principal = self._authorize(creds)
        if principal is None:
            raise LiveRefused(
                http.HTTPStatus.UNAUTHORIZED,
                "not authorized",
                {"WWW-Authenticate": 'Bearer realm="tether"'},
            )
        with self._channels_lock:
            held = self._held.get(principal, 0)
            if self.max_per_principal is not None and held >= self.max_per_principal:
                raise LiveRefused(
                    http.HTTPStatus.TOO_MANY_REQUESTS,
                    f"{held} live connections of this principal are open (at most"
                    f" {self.max_per_principal}): close one, or try again later",
                    {"Retry-After": "5"},
                    code="live_busy",
                )
            self._held[principal] = held + 1
        try:
            self._open(name)  # opened (or touched: not idle) before the handshake completes
        except BaseException:
            self._release_principal(principal)
            raise
        return principal

    def _release_unused(self, admitting: asyncio.Future[str]) -> None:
        """An admission whose handshake was given up: its count given back."""
        if not admitting.cancelled() and admitting.exception() is None:
            self._release_principal(admitting.result())

    def _release_principal(self, principal: str) -> None:
        with self._channels_lock:
            left = self._held.get(principal, 0) - 1
            if left > 0:
                self._held[principal] = left
            else:
                self._held.pop(principal, None)

    def _select_subprotocol(
        self, conn: ServerConnection, subprotocols: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        return Subprotocol(LIVE_SUBPROTOCOL) if LIVE_SUBPROTOCOL in subprotocols else None

    async def _handle(self, conn: ServerConnection) -> None:
        assert conn.request is not None
        name = self._route(urlsplit(conn.request.path).path)
        with self._channels_lock:
            channel = None if name is None else self._channels.get(name)
        resume = _resume(conn.request.path)
        sub = _Subscriber(conn)
        if channel is None:
            # Closed (idle, or evicted) since its admission: a new one is a new epoch.
            await conn.close(
                CLOSE_RESUME_UNAVAILABLE, "the live channel was closed: re-read, reconnect"
            )
            return
        if isinstance(resume, tuple):
            epoch, seq = resume
            last = channel.last_seq
            first = channel.frames[0][0] if channel.frames else last + 1
            if epoch != channel.epoch or seq > last or seq + 1 < first:
                await conn.close(
                    CLOSE_RESUME_UNAVAILABLE, "resume unavailable: re-read the canonical state"
                )
                return
            # No await from here until it is subscribed: no frame can fall in between.
            for s, frame in channel.frames:
                if s > seq:
                    broadcast([conn], frame, text=True)
            self._check(channel, sub)
        if not sub.dropped:
            channel.subs.add(sub)
        session = self._sessions.get(conn)
        watch = (
            None if session is None else asyncio.ensure_future(self._watch_session(conn, *session))
        )
        try:
            # The stream takes no messages: what a client sends (an app-level ping, an ack)
            # is read and dropped. Left unread, four of them filled the connection's queue,
            # which stopped its reading, pongs included, and the keepalive closed it (1011).
            try:
                async for _ in conn:
                    pass
            except ConnectionClosed:
                pass
            await conn.wait_closed()
        finally:
            if watch is not None:
                watch.cancel()
            channel.subs.discard(sub)
            with self._channels_lock:
                channel.last_used = time.monotonic()

    def _check(self, channel: _Channel, sub: _Subscriber) -> None:
        """Close a subscriber whose unsent bytes went over the bound (1013)."""
        transport = sub.conn.transport
        if transport is not None and transport.get_write_buffer_size() > self.buffer_bytes:
            sub.dropped = True
            channel.subs.discard(sub)
            self.dropped += 1
            # The close frame goes after what is buffered; a peer that never reads is cut off
            # after the close timeout.
            task = asyncio.ensure_future(
                sub.conn.close(CLOSE_TOO_SLOW, "subscriber fell behind: resume from the last seq")
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _fanout(self, channel: _Channel, frame: bytes, seq: int) -> None:
        channel.frames.append((seq, frame))
        channel.last_seq = seq
        subs = list(channel.subs)
        broadcast([s.conn for s in subs], frame, text=True)
        self.sent += len(subs)
        for sub in subs:
            self._check(channel, sub)

    def _drop_channel(self, channel: _Channel) -> None:
        """On the loop: close what is still subscribed to a closed channel (1001)."""
        for sub in list(channel.subs):
            channel.subs.discard(sub)
            task = asyncio.ensure_future(sub.conn.close(1001, "the live channel was closed"))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    # --- channels (any thread) ---

    def _open(self, name: str) -> _Channel:
        with self._channels_lock:
            channel = self._channels.get(name)
            if channel is not None:
                channel.last_used = time.monotonic()
                return channel
        if self._stop.is_set() or self.sources is None:
            raise LiveRefused(http.HTTPStatus.SERVICE_UNAVAILABLE, "the live server is closing")
        with self._open_lock:  # one opener at a time: one source per name, never two
            with self._channels_lock:
                channel = self._channels.get(name)
                if channel is not None:
                    channel.last_used = time.monotonic()
                    return channel
                self._room()  # refused before anything is opened
            source = self.sources.open(name)  # a slow open holds no lock the frames need
            evicted: list[_Channel] = []
            try:
                with self._channels_lock:
                    oldest = self._room()
                    if oldest is not None:
                        evicted.append(self._remove(oldest))
                    channel = _Channel(self, name, source)
                    channel.attach()
                    self._channels[name] = channel
                    self.opened += 1
                    return channel
            except LiveRefused:
                self.sources.close(name, source)
                raise
            finally:
                for c in evicted:
                    self._release(c)

    def _room(self) -> _Channel | None:
        """Under the channel lock: the channel to close for one more (None: there is room).

        Raises:
            LiveRefused: 503 (`live_busy`), every open channel has a subscriber.
        """
        if len(self._channels) < self.max_channels:
            return None
        idle = [c for c in self._channels.values() if self._idle(c)]
        if not idle:
            raise LiveRefused(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"{len(self._channels)} live channels are open, each with a subscriber: "
                "try again later",
                {"Retry-After": "5"},
                code="live_busy",
            )
        return min(idle, key=lambda c: c.last_used)

    def _idle(self, channel: _Channel) -> bool:
        return channel is not self._single and not channel.subs

    def _remove(self, channel: _Channel) -> _Channel:
        """Under the channel lock: forget a channel (then `_release` it, outside the lock)."""
        del self._channels[channel.name]
        channel.closed = True
        return channel

    def _release(self, channel: _Channel) -> None:
        channel.source.detach(channel.publish)
        if self.sources is not None and channel is not self._single:
            try:
                self.sources.close(channel.name, channel.source)
            except Exception:
                log.exception("closing a live source failed")
        try:
            self._loop.call_soon_threadsafe(self._drop_channel, channel)
        except RuntimeError:
            pass

    def channel(self, name: str) -> LiveSourceLike:
        """The source of channel `name`, opened if it is not (what a canonical read beside
        the stream reads, so that it gives a position in the frames subscribers get).

        Raises:
            LiveRefused: no such channel (the sources' refusal), or too many open (503).
        """
        if self._single is not None:
            if name != "":
                raise LiveRefused(http.HTTPStatus.NOT_FOUND, "this server has one source")
            return self._single.source
        return self._open(name).source

    @property
    def channels(self) -> list[str]:
        """The names of the open channels."""
        with self._channels_lock:
            return sorted(self._channels)

    def _pump_loop(self) -> None:
        periods = [t for t in (self._heartbeat_s, self._sync_s) if t is not None]
        period = min([*periods, self.idle_s / 4, 1.0]) if self.sources is not None else min(periods)
        while not self._stop.wait(period):
            with self._channels_lock:
                channels = list(self._channels.values())
            now = time.monotonic()
            for channel in channels:
                try:
                    if self._sync_s is not None:
                        channel.source.sync()
                    if (
                        self._heartbeat_s is not None
                        and now - channel.last_frame >= self._heartbeat_s
                    ):
                        channel.source.heartbeat()
                except Exception:  # a failed read is retried on the next period
                    log.exception("live source sync failed", extra={"channel": channel.name})
            if self.sources is not None:
                self._sweep(time.monotonic())

    def _sweep(self, now: float) -> None:
        """Close the channels idle for `idle_s`."""
        evicted = []
        with self._channels_lock:
            for channel in list(self._channels.values()):
                if self._idle(channel) and now - channel.last_used >= self.idle_s:
                    evicted.append(self._remove(channel))
        for channel in evicted:
            self._release(channel)

    # --- any thread ---

    @property
    def epoch(self) -> int:
        """The single source's epoch."""
        assert self._single is not None, "a routed server has an epoch per channel"
        return self._single.epoch

    def publish(self, frame: bytes, seq: int) -> None:
        """Send one frame of the single source (thread-safe, never waits)."""
        assert self._single is not None, "a routed server's frames come from its sources"
        self._single.publish(frame, seq)

    @property
    def port(self) -> int:
        assert self._server is not None
        sockets = list(self._server.sockets)
        return int(sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """The endpoint's ``ws://`` (``wss://`` with TLS) URL; a routed server's channels are
        at `url_for`."""
        assert self._server is not None
        host = next(iter(self._server.sockets)).getsockname()[0]
        shown = f"[{host}]" if ":" in host else host
        return f"{'wss' if self._ssl is not None else 'ws'}://{shown}:{self.port}{self.path}"

    def url_for(self, name: str) -> str:
        """The URL of channel `name` of a routed server."""
        return f"{self.url}/{quote(name, safe=':@+')}"

    @property
    def subscribers(self) -> int:
        """How many subscribers are connected (every channel)."""
        with self._channels_lock:
            return sum(len(c.subs) for c in self._channels.values())

    def close(self) -> None:
        """Stop serving: close every connection (1001), release the port and every channel,
        stop the threads."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._pump is not None:
            self._pump.join()
        with self._channels_lock:
            channels = [self._remove(c) for c in list(self._channels.values())]
        for channel in channels:
            channel.source.detach(channel.publish)
            if self.sources is not None:
                try:
                    self.sources.close(channel.name, channel.source)
                except Exception:
                    log.exception("closing a live source failed")

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
