"""A live AG-UI run stream: one run's events fanned out to SSE subscribers over HTTP.

A subscriber that connects at any time receives RUN_STARTED, then a MESSAGES_SNAPSHOT of the
activity messages as they stand at that moment, then every later event live, and the stream
ends after RUN_FINISHED. Publishing and subscribing share one lock, so the snapshot a new
subscriber receives and the live events it is queued for never overlap or leave a gap.
The message state is the AG-UI activity store fed with every event of the run, RUN_STARTED and
RUN_FINISHED/RUN_ERROR included (the stream only transports; it never interprets an event
itself, and the store enforces the run lifecycle). `tether demo` and `tether worker
--sse-port` serve their runs through it; `LiveActivities` (tether.agui.live) feeds it.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from tether.agui._store import ActivityStore

__all__ = ["MessageState", "RunStream", "StoreState", "StreamServer", "sse_frame"]

KEEPALIVE_S = 10.0
EVENT_PATHS = ("/", "/events")


class MessageState(Protocol):
    """What the stream needs from an activity store: take events, list messages so far."""

    def feed(self, event: dict[str, Any]) -> None:
        """Apply one AG-UI event (run events included)."""
        ...

    def messages(self) -> list[dict[str, Any]]:
        """The activity messages so far, in sequence order, as AG-UI JSON objects."""
        ...


def sse_frame(event: dict[str, Any]) -> bytes:
    """One SSE frame carrying `event` as compact JSON (no NaN: AG-UI is strict JSON)."""
    data = json.dumps(event, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return b"data: " + data.encode() + b"\n\n"


class RunStream:
    """One AG-UI run (thread id, run id) fanned out to any number of subscribers."""

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        state: MessageState,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.thread_id = thread_id
        self.run_id = run_id
        self._state = state
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue[bytes | None]] = []
        self._started: dict[str, Any] | None = None
        self._finished: dict[str, Any] | None = None
        self._log: list[dict[str, Any]] = []

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
                self._started = started
                self._send(started)

    def publish(self, event: dict[str, Any]) -> None:
        """Feed an activity event to the message state and send it to every subscriber."""
        with self._lock:
            if self._started is None or self._finished is not None:
                raise RuntimeError("publish outside a started, unfinished run")
            self._state.feed(event)
            self._send(event)

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
            self._finished = finished
            self._send(finished)
            for sub in self._subscribers:
                sub.put(None)
            self._subscribers.clear()

    def events(self) -> list[dict[str, Any]]:
        """Every event published so far, as a subscriber from the start saw them."""
        with self._lock:
            return list(self._log)

    def _send(self, event: dict[str, Any]) -> None:
        self._log.append(event)
        frame = sse_frame(event)
        for sub in self._subscribers:
            sub.put(frame)

    def subscribe(self) -> queue.Queue[bytes | None]:
        """A queue of SSE frames: RUN_STARTED, MESSAGES_SNAPSHOT, then live; None ends it."""
        sub: queue.Queue[bytes | None] = queue.Queue()
        with self._lock:
            if self._started is None:
                raise RuntimeError("subscribe before the run started")
            sub.put(sse_frame(self._started))
            snapshot = {
                "type": "MESSAGES_SNAPSHOT",
                "timestamp": self._clock(),
                "messages": self._state.messages(),
            }
            sub.put(sse_frame(snapshot))
            if self._finished is not None:
                sub.put(sse_frame(self._finished))
                sub.put(None)
            else:
                self._subscribers.append(sub)
        return sub

    def unsubscribe(self, sub: queue.Queue[bytes | None]) -> None:
        """Stop queueing frames for a subscriber that went away."""
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)


def _handler(stream: RunStream, on_subscribe: Callable[[], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Keep the terminal for the caller's own output."""

        def do_GET(self) -> None:
            self._events()

        def do_POST(self) -> None:
            # AG-UI clients POST a RunAgentInput; this stream serves one fixed run, so the body
            # is read and ignored.
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._events()

        def _events(self) -> None:
            if self.path.split("?")[0] not in EVENT_PATHS:
                self.send_error(HTTPStatus.NOT_FOUND, "the event stream is at /events")
                return
            sub = stream.subscribe()
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            on_subscribe()
            try:
                while True:
                    try:
                        frame = sub.get(timeout=KEEPALIVE_S)
                    except queue.Empty:
                        frame = b": keepalive\n\n"
                    if frame is None:
                        break
                    self.wfile.write(frame)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
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
        """The activity messages so far."""
        return self.store.activities()


class StreamServer:
    """A localhost HTTP server (stdlib, one thread per client) serving one `RunStream`."""

    def __init__(self, stream: RunStream, host: str = "127.0.0.1", port: int = 0) -> None:
        self._subscribers = 0
        self._changed = threading.Condition()
        self._httpd = ThreadingHTTPServer((host, port), _handler(stream, self._count))
        self._httpd.daemon_threads = True
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
        return f"http://{host!s}:{port}/events"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
