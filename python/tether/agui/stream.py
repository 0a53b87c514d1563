"""A live AG-UI run stream: one run's events fanned out to SSE subscribers, in bounded memory.

Rules the stream keeps (everything that decides what a subscriber receives lives here):

- Every event of the run gets the next sequence number; its SSE frame carries
  ``id: <run id>:<n>`` and is encoded once, shared by the replay window and every queue.
- The stream keeps only a **replay window**: the last events, bounded by count and by bytes
  (`StreamLimits.window_events`, `.window_bytes`); older frames are dropped, never kept.
- A **new subscriber** (no ``Last-Event-ID``, or one naming another run) receives RUN_STARTED,
  a MESSAGES_SNAPSHOT of the activity messages as they stand (its ``id`` is the last event it
  covers), then every later event live; after the end, the snapshot and RUN_FINISHED/RUN_ERROR.
- A **resuming subscriber** (``Last-Event-ID`` of this run) receives the events after that id
  when all of them are still in the window; otherwise a **resync**: a
  MESSAGES_SNAPSHOT of the messages as they stand (no second RUN_STARTED: the run is the same
  one), then live. A resume at the run's last event after the end has nothing left
  (`Subscription.ended`; the HTTP server answers 204, which stops an EventSource reconnecting).
- Snapshot and live events never overlap or leave a gap: publishing, subscribing and resuming
  share one lock, so a subscriber is queued exactly the events after the state it was given.
- Each subscriber's queue of live frames is bounded (`queue_frames`, `queue_bytes`); the frames
  it opens with (RUN_STARTED and the snapshot, or the replay) are not counted, being bounded by
  the message state and the window already. Publishing never waits: a subscriber
  whose queue would overflow is **dropped**: its queued frames are released, it gets no more,
  and its connection ends with the comment ``: resync ...``. Reconnecting with the last id it
  received resumes from the window or resyncs. A connection whose writes make no progress for
  `write_timeout_s` is closed, so a peer that stopped reading holds no thread for long.
- The message state is the AG-UI activity store fed with every event of the run, RUN_STARTED
  and RUN_FINISHED/RUN_ERROR included: the stream only transports, the store interprets (and
  enforces the run lifecycle). It holds each message's current content only, so it is bounded
  by the messages held. `forget(message_id)` leaves a message out of later snapshots (the
  retention `LiveActivities` applies to settled Activities); a subscriber that already holds
  the message keeps it until a resync, whose MESSAGES_SNAPSHOT replaces its history.

`tether demo` and `tether worker --sse-port` serve their runs through it; `LiveActivities`
(tether.agui.live) feeds it.

`StreamServer` serves it under the listener policy every network listener shares
(`tether._listen.ListenerPolicy`): loopback unless TLS is configured, HTTPS (TLS 1.2 or later)
with it, and off loopback a principal on every request (``Authorization: Bearer <token>``,
any role: every role reads the stream); a credential in the URL is refused on every bind.
"""

from __future__ import annotations

import json
import queue
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from itertools import islice
from typing import Any, Protocol

from tether._listen import (
    PEER_CHECK_S,
    Authenticates,
    ListenerPolicy,
    PolicyHTTPServer,
    Refusal,
    TlsConfig,
    peer_gone,
    refusal_body,
)
from tether.agui._store import ActivityStore

__all__ = [
    "MessageState",
    "RunStream",
    "StoreState",
    "StreamLimits",
    "StreamServer",
    "Subscription",
    "sse_frame",
]

KEEPALIVE_S = 10.0
#: A TLS client that has not finished its handshake by then is dropped (it holds one thread).
EVENT_PATHS = ("/", "/events")
#: The largest RunAgentInput body a POST may send (read, then ignored).
MAX_BODY = 1024 * 1024
# The last frame a dropped subscriber's connection carries (an SSE comment: parsers skip it).
RESYNC_COMMENT = (
    b": resync: this subscriber fell behind and was dropped; reconnect with Last-Event-ID\n\n"
)


class MessageState(Protocol):
    """What the stream needs from an activity store: take events, list messages, forget one."""

    def feed(self, event: dict[str, Any]) -> None:
        """Apply one AG-UI event (run events included)."""
        ...

    def messages(self) -> list[dict[str, Any]]:
        """The activity messages held, in sequence order, as AG-UI JSON objects."""
        ...

    def forget(self, message_id: str) -> None:
        """Leave `message_id` out of every later `messages()` (no-op when not held)."""
        ...


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"StreamLimits.{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class StreamLimits:
    """The memory bounds of a `RunStream` (see the module rules).

    Attributes:
        window_events: at most this many recent events are kept for resuming subscribers.
        window_bytes: and at most this many bytes of their frames.
        queue_frames: a subscriber with more live frames than this waiting is dropped.
        queue_bytes: and one with more bytes than this waiting.
        write_timeout_s: a connection whose write makes no progress this long is closed.
    """

    window_events: int = 4096
    window_bytes: int = 4 * 1024 * 1024
    queue_frames: int = 4096
    queue_bytes: int = 4 * 1024 * 1024
    write_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("window_events", "window_bytes", "queue_frames", "queue_bytes"):
            _positive_int(name, getattr(self, name))
        t = self.write_timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < float("inf"):
            raise ValueError(f"StreamLimits.write_timeout_s must be > 0 seconds, got {t!r}")


def sse_frame(event: dict[str, Any], event_id: str | None = None) -> bytes:
    """One SSE frame carrying `event` as compact JSON (no NaN: AG-UI is strict JSON), with an
    ``id:`` line when `event_id` is given."""
    data = json.dumps(event, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    head = b"" if event_id is None else b"id: " + event_id.encode() + b"\n"
    return head + b"data: " + data.encode() + b"\n\n"


def _frame_event(frame: bytes) -> dict[str, Any]:
    for line in frame.splitlines():
        if line.startswith(b"data: "):
            event: dict[str, Any] = json.loads(line[len(b"data: ") :])
            return event
    raise ValueError("an SSE frame without data")  # pragma: no cover - every frame has data


class Subscription:
    """One subscriber's bounded queue of SSE frames; `get` gives None once the stream ended.

    The stream puts frames under its lock and never waits; the subscriber's reader takes them.
    """

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self._cond = threading.Condition()
        # (frame, counted): the opening frames are not counted against the queue bound.
        self._frames: deque[tuple[bytes, bool]] = deque()
        self._counted = 0
        self._bytes = 0
        self._closed = False
        self.dropped = False
        """True once the stream dropped this subscriber for falling behind."""
        self.ended = False
        """True when there was nothing to send: a resume at the end of a finished run."""

    def _open(self, frame: bytes) -> None:
        self._frames.append((frame, False))

    def _put(self, frame: bytes) -> bool:
        """Queue a live frame; False (and the subscriber dropped) when it would overflow."""
        with self._cond:
            if self._closed:
                return False
            if (
                self._counted + 1 > self._limits.queue_frames
                or self._bytes + len(frame) > self._limits.queue_bytes
            ):
                self._frames.clear()
                self._counted = self._bytes = 0
                self.dropped = self._closed = True
                self._cond.notify_all()
                return False
            self._frames.append((frame, True))
            self._counted += 1
            self._bytes += len(frame)
            self._cond.notify_all()
            return True

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def pending(self) -> tuple[int, int]:
        """(frames, bytes) waiting to be read, the opening frames included."""
        with self._cond:
            return len(self._frames), sum(len(f) for f, _ in self._frames)

    def get(self, timeout: float | None = None) -> bytes | None:
        """The next frame; None when the stream ended or dropped this subscriber.

        Raises:
            queue.Empty: nothing arrived within `timeout` seconds.
        """
        return self.take(timeout, max_bytes=1)

    def take(self, timeout: float | None = None, *, max_bytes: int = 256 * 1024) -> bytes | None:
        """The frames waiting, joined (at least one, then up to `max_bytes`); None at the end.

        A writer takes them in one call so it makes one write per batch, not one per frame
        (each write gives up the GIL, and getting it back can take a switch interval).

        Raises:
            queue.Empty: nothing arrived within `timeout` seconds.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._frames or self._closed, timeout):
                raise queue.Empty
            if not self._frames:
                return None
            out: list[bytes] = []
            size = 0
            while self._frames and (not out or size + len(self._frames[0][0]) <= max_bytes):
                frame, counted = self._frames.popleft()
                if counted:
                    self._counted -= 1
                    self._bytes -= len(frame)
                out.append(frame)
                size += len(frame)
            return out[0] if len(out) == 1 else b"".join(out)

    def __iter__(self) -> Iterator[bytes]:
        """The frames until the end (blocking)."""
        while (frame := self.get()) is not None:
            yield frame


class RunStream:
    """One AG-UI run (thread id, run id) fanned out to any number of subscribers.

    Args:
        thread_id: the run's AG-UI thread id.
        run_id: the run id; it prefixes every frame id, so it may not hold a line break.
        state: the message state (`StoreState`), single owner: only the stream feeds it.
        clock: integer milliseconds for timestamps (wall clock by default).
        limits: the memory bounds (`StreamLimits()` by default).
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        state: MessageState,
        *,
        clock: Callable[[], int] | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        if not isinstance(run_id, str) or not run_id or any(c in run_id for c in "\r\n\0"):
            raise ValueError(f"run_id must be a non-empty str without line breaks, got {run_id!r}")
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.thread_id = thread_id
        self.run_id = run_id
        self.limits = limits or StreamLimits()
        self._state = state
        self._lock = threading.Lock()
        self._subscribers: list[Subscription] = []
        self._started: bytes | None = None
        self._finished: bytes | None = None
        self._seq = 0
        # The replay window: frames of events first_seq .. self._seq, oldest first.
        self._window: deque[bytes] = deque()
        self._window_bytes = 0
        self.dropped = 0
        """How many subscribers were dropped for falling behind so far."""

    def start(self) -> None:
        """Publish RUN_STARTED (once)."""
        with self._lock:
            if self._started is None:
                started = {
                    "type": "RUN_STARTED",
                    "timestamp": self._clock(),
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                }
                self._state.feed(started)
                self._started = self._send(started)

    def publish(self, event: dict[str, Any]) -> None:
        """Feed an activity event to the message state and send it to every subscriber."""
        with self._lock:
            if self._started is None or self._finished is not None:
                raise RuntimeError("publish outside a started, unfinished run")
            self._state.feed(event)
            self._send(event)

    def forget(self, message_id: str) -> None:
        """Leave a message out of every later snapshot (see the module rules)."""
        with self._lock:
            if self._finished is None:  # after the end no event (nor snapshot) changes it
                self._state.forget(message_id)

    def finish(self, *, error: str | None = None) -> None:
        """Publish RUN_FINISHED (or RUN_ERROR with `error`) and end every subscriber's stream."""
        with self._lock:
            if self._started is None or self._finished is not None:
                return
            finished: dict[str, Any]
            if error is None:
                finished = {
                    "type": "RUN_FINISHED",
                    "timestamp": self._clock(),
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                }
            else:
                finished = {"type": "RUN_ERROR", "timestamp": self._clock(), "message": error}
            self._state.feed(finished)
            self._finished = self._send(finished)
            for sub in self._subscribers:
                sub._close()
            self._subscribers.clear()

    def events(self) -> list[dict[str, Any]]:
        """The events still in the replay window, oldest first (all of a short run's)."""
        with self._lock:
            frames = list(self._window)
        return [_frame_event(f) for f in frames]

    @property
    def last_event_id(self) -> str | None:
        """The id of the last event published (None before RUN_STARTED)."""
        with self._lock:
            return None if self._seq == 0 else self._id(self._seq)

    @property
    def subscribers(self) -> int:
        """How many subscribers are queued for live events."""
        with self._lock:
            return len(self._subscribers)

    def backlog(self) -> list[tuple[int, int]]:
        """(frames, bytes) waiting for each live subscriber, in subscription order."""
        with self._lock:
            subs = list(self._subscribers)
        return [sub.pending for sub in subs]

    def window(self) -> tuple[int, int]:
        """(events, bytes) held in the replay window."""
        with self._lock:
            return len(self._window), self._window_bytes

    def _id(self, seq: int) -> str:
        return f"{self.run_id}:{seq}"

    def _send(self, event: dict[str, Any]) -> bytes:
        self._seq += 1
        frame = sse_frame(event, self._id(self._seq))
        self._window.append(frame)
        self._window_bytes += len(frame)
        while self._window and (
            len(self._window) > self.limits.window_events
            or self._window_bytes > self.limits.window_bytes
        ):
            self._window_bytes -= len(self._window.popleft())
        kept: list[Subscription] = []
        for sub in self._subscribers:
            if sub._put(frame):
                kept.append(sub)
            else:
                self.dropped += 1
        self._subscribers = kept
        return frame

    def _seq_of(self, last_event_id: str | None) -> int | None:
        """The sequence number `last_event_id` names in this run (None: not this run's)."""
        if last_event_id is None:
            return None
        run, sep, seq = last_event_id.strip().rpartition(":")
        if not sep or run != self.run_id or not (seq.isascii() and seq.isdigit()) or len(seq) > 18:
            return None  # not an id this stream gave (a header is the peer's input: never raise)
        return int(seq)

    def _snapshot_frame(self) -> bytes:
        # The snapshot covers every event fed so far except a final RUN_FINISHED/RUN_ERROR,
        # which a subscriber receives after it: its id is the last event it covers.
        covers = self._seq - 1 if self._finished is not None else self._seq
        snapshot = {
            "type": "MESSAGES_SNAPSHOT",
            "timestamp": self._clock(),
            "messages": self._state.messages(),
        }
        return sse_frame(snapshot, self._id(covers))

    def subscribe(self, last_event_id: str | None = None) -> Subscription:
        """A subscriber's frames (see the module rules for what it receives).

        Args:
            last_event_id: the SSE ``Last-Event-ID`` a reconnecting subscriber sent.
        """
        sub = Subscription(self.limits)
        with self._lock:
            if self._started is None:
                raise RuntimeError("subscribe before the run started")
            resume = self._seq_of(last_event_id)
            if resume is None or resume > self._seq:
                if resume is None:
                    sub._open(self._started)
                sub._open(self._snapshot_frame())
                if self._finished is not None:
                    sub._open(self._finished)
            else:
                first = self._seq - len(self._window) + 1
                missed = self._seq - resume
                replay = (
                    []
                    if resume + 1 < first
                    else list(islice(self._window, len(self._window) - missed, None))
                )
                if len(replay) == missed:
                    for frame in replay:
                        sub._open(frame)
                else:
                    sub._open(self._snapshot_frame())
                    if self._finished is not None:
                        sub._open(self._finished)
                if self._finished is not None and missed == 0:
                    sub.ended = True
            if self._finished is not None:
                sub._close()
            else:
                self._subscribers.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop queueing frames for a subscriber that went away."""
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)
            sub._close()


def _handler(
    stream: RunStream, on_subscribe: Callable[[], None], policy: ListenerPolicy
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # A socket timeout bounds every read and write: a peer that stops reading is closed
        # after it instead of holding this thread (and its frame) forever.
        timeout = stream.limits.write_timeout_s

        def log_message(self, format: str, *args: Any) -> None:
            """Keep the terminal for the caller's own output (and a request line, which may
            carry a refused secret in its query, out of every log)."""

        def do_GET(self) -> None:
            self._events()

        def do_POST(self) -> None:
            self._events(body=True)

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """What the server refuses (an unknown path, a method the stream does not serve, a
            malformed request) is JSON, as a refusal of the policy is: never an HTML page."""
            body, status, extra = refusal_body(code, message, self.command)
            self.close_connection = True
            try:
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
            except OSError:
                pass

        def _refuse(self, refusal: Refusal) -> None:
            body = json.dumps({"code": refusal.code, "message": refusal.message}).encode()
            self.close_connection = True
            self.send_response(refusal.status)
            for name, value in refusal.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def _events(self, *, body: bool = False) -> None:
            # Who asks is settled before anything else is read or answered.
            try:
                policy.authorize(
                    self.headers,
                    action="read",
                    target=self.path,
                    peer=str(self.client_address[0]),
                )
            except Refusal as refusal:
                self._refuse(refusal)
                return
            if body:
                # AG-UI clients POST a RunAgentInput; this stream serves one fixed run, so the
                # body is read and ignored.
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length < 0:
                    self.send_error(HTTPStatus.BAD_REQUEST, "bad Content-Length")
                    return
                if length > MAX_BODY:
                    self.send_error(
                        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"a request body is at most {MAX_BODY} bytes",
                    )
                    return
                if length:
                    self.rfile.read(length)
            if self.path.split("?")[0] not in EVENT_PATHS:
                self.send_error(HTTPStatus.NOT_FOUND, "the event stream is at /events")
                return
            sub = stream.subscribe(self.headers.get("Last-Event-ID"))
            if sub.ended:
                self.send_response(HTTPStatus.NO_CONTENT)
                self.end_headers()
                return
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            on_subscribe()
            try:
                last_write = time.monotonic()
                while True:
                    try:
                        frame = sub.take(timeout=PEER_CHECK_S)
                    except queue.Empty:
                        # Idle: a client that went away is let go now (its thread and its
                        # subscription), not at a later write that fails.
                        if peer_gone(self.connection):
                            self.close_connection = True
                            break
                        if time.monotonic() - last_write < KEEPALIVE_S:
                            continue
                        frame = b": keepalive\n\n"
                    if frame is None:
                        if sub.dropped:
                            self.wfile.write(RESYNC_COMMENT)
                            self.wfile.flush()
                        break
                    self.wfile.write(frame)
                    self.wfile.flush()
                    last_write = time.monotonic()
            except (TimeoutError, BrokenPipeError, ConnectionResetError, ssl.SSLError):
                self.close_connection = True
            finally:
                stream.unsubscribe(sub)

    return Handler


class StoreState:
    """`MessageState` over the AG-UI `ActivityStore` (the stream's lock makes it single-owner)."""

    def __init__(self) -> None:
        self.store = ActivityStore()

    def feed(self, event: dict[str, Any]) -> None:
        """Apply one event to the store."""
        self.store.handle_event(event)

    def messages(self) -> list[dict[str, Any]]:
        """The activity messages held."""
        return self.store.activities()

    def forget(self, message_id: str) -> None:
        """Rebuild the store without `message_id`: a MESSAGES_SNAPSHOT of the others replaces
        its history (the store's own rule), inside the open run."""
        held = self.store.activities()
        kept = [m for m in held if m["id"] != message_id]
        if len(kept) != len(held):
            self.store.handle_event({"type": "MESSAGES_SNAPSHOT", "messages": kept})


class StreamServer:
    """An HTTP(S) server (stdlib, one thread per client) serving one `RunStream` under the
    listener policy (`tether._listen`).

    Args:
        stream: the run served.
        host: the bind address: loopback unless `tls` is given.
        port: the port (0: any free one; `url` tells which).
        tls: the `[tls]` table (`HostConfig.tls`): serve HTTPS, and allow a non-loopback bind.
        authenticator: the daemon's `HostConfig.authenticator()`; off loopback every request
            must carry ``Authorization: Bearer <token>`` of a principal it knows.
        require_principal: ask for a principal even on loopback (default: off loopback only).

    Raises:
        ListenerError: the policy refused the listener (an `OSError`, like a bind failure):
            `insecure_listener`, `no_authenticator`, `insecure_tls_key`, `tls_unusable`.
        OSError: the address could not be bound.
    """

    def __init__(
        self,
        stream: RunStream,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: TlsConfig | None = None,
        authenticator: Authenticates | None = None,
        require_principal: bool | None = None,
    ) -> None:
        self.policy = ListenerPolicy(
            (host, port), tls, authenticator, require_principal=require_principal
        )
        self._subscribers = 0
        self._changed = threading.Condition()
        self._httpd = PolicyHTTPServer(self.policy, _handler(stream, self._count, self.policy))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="tether-sse", daemon=True
        )
        self._thread.start()

    def _count(self) -> None:
        with self._changed:
            self._subscribers += 1
            self._changed.notify_all()

    def wait_for_subscribers(self, n: int, timeout: float | None = None) -> bool:
        """Block until `n` subscribers have connected in total (False on timeout)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._subscribers >= n, timeout)

    @property
    def url(self) -> str:
        """The event stream's URL."""
        host, port = self._httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"{self.policy.scheme}://{shown}:{port}/events"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
