"""The bounded AG-UI run stream: frame ids, the replay window, Last-Event-ID resume and resync,
bounded subscriber queues that drop a lagging subscriber (real HTTP on loopback), no gap."""

from __future__ import annotations

import http.client
import json
import queue
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether._core import ActivityStore
from tether.agui.stream import (
    RESYNC_COMMENT,
    RunStream,
    StoreState,
    StreamLimits,
    StreamServer,
    Subscription,
)

KIND = "physical_ai.sim_episode"
VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")


def _snapshot(mid: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ACTIVITY_SNAPSHOT", "messageId": mid, "activityType": KIND, "content": content}


def _delta(mid: str, steps: int) -> dict[str, Any]:
    patch = [{"op": "replace", "path": "/steps", "value": steps}]
    return {"type": "ACTIVITY_DELTA", "messageId": mid, "activityType": KIND, "patch": patch}


def _stream(**limits: Any) -> RunStream:
    stream = RunStream("thread-1", "run-1", StoreState(), limits=StreamLimits(**limits))
    stream.start()
    return stream


def _parse(body: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """(id, event) of every SSE frame in a capture (comments skipped)."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    for block in body.split(b"\n\n"):
        fid, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"id: "):
                fid = line[4:].decode()
            elif line.startswith(b"data: "):
                data = json.loads(line[6:])
        if data is not None:
            out.append((fid, data))
    return out


def _seq(fid: str | None) -> int:
    assert fid is not None and fid.startswith("run-1:"), fid
    return int(fid.rpartition(":")[2])


def _drain(sub: Subscription) -> bytes:
    return b"".join(sub)


def _rebuilt(*bodies: bytes, lifecycle: str = "strict") -> list[dict[str, Any]]:
    """The activities a consumer holds after reading these captures in order (no warnings)."""
    store = ActivityStore(lifecycle=lifecycle)
    for body in bodies:
        assert store.feed(body) == []
    store.finish()
    return store.activities()


def _expected(stream: RunStream) -> list[dict[str, Any]]:
    after = stream.subscribe()  # a fresh subscriber after the end: the whole picture
    return _rebuilt(_drain(after))


def validate_capture(body: bytes, path: Path) -> None:
    """`ag-ui-validate --json` on a capture: no errors and no warnings."""
    path.write_bytes(body)
    done = subprocess.run(
        [str(VALIDATOR), "--json", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report


# --- the window and the frames ---


def test_frames_carry_ids_and_the_window_keeps_only_the_last_events() -> None:
    stream = _stream(window_events=5)
    sub = stream.subscribe()
    stream.publish(_snapshot("a", {"steps": 0}))
    for i in range(1, 20):
        stream.publish(_delta("a", i))
    stream.finish()
    frames = _parse(_drain(sub))
    assert [f[1]["type"] for f in frames[:3]] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
    ]
    assert [f[0] for f in frames] == ["run-1:1", "run-1:1"] + [f"run-1:{n}" for n in range(2, 23)]
    assert stream.window()[0] == 5 and stream.last_event_id == "run-1:22"
    kept = stream.events()
    assert [e["type"] for e in kept] == ["ACTIVITY_DELTA"] * 4 + ["RUN_FINISHED"]
    assert kept[0]["patch"][0]["value"] == 16


def test_the_byte_bound_keeps_the_window_under_it() -> None:
    stream = _stream(window_bytes=2_000)
    for i in range(200):
        stream.publish(_snapshot(f"a-{i % 3}", {"steps": i, "pad": "x" * 100}))
    events, size = stream.window()
    assert 0 < size <= 2_000 and 5 <= events <= 10  # frames of about 240 bytes
    assert stream.events()[-1]["content"]["steps"] == 199


@pytest.mark.parametrize(
    "bad",
    [
        {"window_events": 0},
        {"queue_bytes": -1},
        {"queue_frames": True},
        {"window_bytes": 1.5},
        {"write_timeout_s": 0},
        {"write_timeout_s": float("inf")},
    ],
)
def test_limits_refuse_a_bound_that_is_not_one(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="StreamLimits"):
        StreamLimits(**bad)


def test_a_run_id_that_would_break_the_id_line_is_refused() -> None:
    with pytest.raises(ValueError, match="line breaks"):
        RunStream("t", "run\n1", StoreState())


# --- resume ---


def test_resume_inside_the_window_gets_exactly_the_missed_events() -> None:
    stream = _stream(window_events=50)
    first = stream.subscribe()
    stream.publish(_snapshot("a", {"steps": 0}))
    stream.publish(_delta("a", 1))
    got = b"".join(first.get(timeout=5) or b"" for _ in range(4))  # then the client goes away
    stream.unsubscribe(first)
    last = _parse(got)[-1][0]
    assert last == "run-1:3"
    for i in range(2, 30):
        stream.publish(_delta("a", i))
    resumed = stream.subscribe(last)
    stream.publish(_snapshot("b", {"steps": 0}))
    stream.finish()
    rest = _drain(resumed)
    frames = _parse(rest)
    assert [_seq(f[0]) for f in frames] == list(range(4, 34))
    assert "RUN_STARTED" not in {f[1]["type"] for f in frames}
    assert "MESSAGES_SNAPSHOT" not in {f[1]["type"] for f in frames}
    assert _rebuilt(got, rest) == _expected(stream)


def test_resume_outside_the_window_resyncs_with_a_snapshot() -> None:
    stream = _stream(window_events=10)
    first = stream.subscribe()
    stream.publish(_snapshot("a", {"steps": 0}))
    got = b"".join(first.get(timeout=5) or b"" for _ in range(3))
    stream.unsubscribe(first)
    for i in range(1, 40):
        stream.publish(_delta("a", i))
    stream.publish(_snapshot("b", {"steps": 7}))
    resumed = stream.subscribe("run-1:2")
    stream.publish(_delta("b", 8))
    stream.finish()
    frames = _parse(_drain(resumed))
    assert [f[1]["type"] for f in frames] == ["MESSAGES_SNAPSHOT", "ACTIVITY_DELTA", "RUN_FINISHED"]
    assert [_seq(f[0]) for f in frames] == [42, 43, 44]  # the snapshot covers up to event 42
    snap = {m["id"]: m["content"] for m in frames[0][1]["messages"]}
    assert snap == {"a": {"steps": 39}, "b": {"steps": 7}}
    assert _rebuilt(got, _drain(stream.subscribe("run-1:2"))) == _expected(stream)


def test_a_resume_replays_the_window_even_past_the_queue_bound() -> None:
    stream = _stream(window_events=100, queue_frames=5)
    stream.publish(_snapshot("a", {"steps": 0}))
    for i in range(1, 20):
        stream.publish(_delta("a", i))
    far = stream.subscribe("run-1:5")  # 16 missed: the window's frames, not counted as live
    for i in range(20, 24):
        stream.publish(_delta("a", i))  # 4 live frames fit the queue of 5
    assert not far.dropped
    stream.publish(_delta("a", 24))
    stream.publish(_delta("a", 25))  # the 6th live frame does not
    assert far.dropped and far.get(timeout=1) is None


def test_resume_after_the_end_and_ids_of_another_run() -> None:
    stream = _stream()
    stream.publish(_snapshot("a", {"steps": 1}))
    stream.finish()
    assert stream.last_event_id == "run-1:3"
    done = stream.subscribe("run-1:3")
    assert done.ended and done.get(timeout=1) is None
    one_short = _parse(_drain(stream.subscribe("run-1:2")))
    assert [f[1]["type"] for f in one_short] == ["RUN_FINISHED"] and done.ended
    for stale in ("run-0:2", "garbage", "run-1:x", "", "run-1:²", "run-1:" + "9" * 5000):
        fresh = _parse(_drain(stream.subscribe(stale)))
        assert [f[1]["type"] for f in fresh] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    future = _parse(_drain(stream.subscribe("run-1:99")))
    assert [f[1]["type"] for f in future] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]


# --- bounded queues ---


def test_a_subscriber_that_does_not_read_is_dropped_and_others_are_not() -> None:
    stream = _stream(queue_frames=8)
    lagging = stream.subscribe()
    reading = stream.subscribe()
    seen: list[bytes] = []
    stream.publish(_snapshot("a", {"steps": 0}))
    for i in range(1, 100):
        stream.publish(_delta("a", i))
        seen.append(reading.get(timeout=5) or b"")
    assert lagging.dropped and not reading.dropped
    assert lagging.pending == (0, 0)  # its frames were released when it was dropped
    assert lagging.get(timeout=1) is None
    assert stream.dropped == 1 and stream.subscribers == 1


def test_take_gives_the_waiting_frames_in_one_batch() -> None:
    stream = _stream()
    sub = stream.subscribe()
    stream.publish(_snapshot("a", {"steps": 0}))
    stream.publish(_delta("a", 1))
    stream.publish(_delta("a", 2))
    first = sub.take(timeout=1, max_bytes=1)  # at least one frame, even over the cap
    rest = sub.take(timeout=1)
    assert first is not None and rest is not None
    assert [f[1]["type"] for f in _parse(first)] == ["RUN_STARTED"]
    assert [_seq(f[0]) for f in _parse(rest)] == [1, 2, 3, 4]  # the snapshot (id 1), 3 events
    with pytest.raises(queue.Empty):
        sub.take(timeout=0)
    stream.finish()
    assert sub.take(timeout=1) is not None and sub.take(timeout=1) is None


def test_snapshot_and_live_never_overlap_or_leave_a_gap_under_load() -> None:
    stream = _stream(window_events=64)
    mids = [f"a-{i}" for i in range(5)]
    for mid in mids:
        stream.publish(_snapshot(mid, {"steps": 0}))
    done = threading.Event()

    def publish() -> None:
        rng = random.Random(7)
        for i in range(1, 3000):
            mid = rng.choice(mids)
            if i % 97 == 0:
                stream.publish(_snapshot(mid, {"steps": i, "again": True}))
            else:
                stream.publish(_delta(mid, i))
            if i % 50 == 0:
                threading.Event().wait(0.002)  # let subscribers in between bursts
        done.set()

    subs: list[tuple[Subscription, str | None]] = []
    publisher = threading.Thread(target=publish)
    publisher.start()
    while not done.is_set() and len(subs) < 60:
        back = (None, 0, 10, 200)[len(subs) % 4]  # fresh, at the head, in the window, past it
        last = stream.last_event_id
        resume = None if back is None else f"run-1:{max(1, _seq(last) - back)}"
        subs.append((stream.subscribe(resume), resume))
        threading.Event().wait(0.003)
    publisher.join()
    stream.finish()
    expected = _expected(stream)
    assert len(subs) > 5
    kinds = set()
    for sub, resume in subs:
        body = _drain(sub)
        frames = _parse(body)
        if resume is None:
            assert frames[0][1]["type"] == "RUN_STARTED" and _seq(frames[0][0]) == 1
            frames = frames[1:]
        seqs = [_seq(f[0]) for f in frames]
        if frames[0][1]["type"] == "MESSAGES_SNAPSHOT":
            # The snapshot's id is the last event it covers; live goes on from the next one.
            kinds.add("snapshot")
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            assert _rebuilt(body, lifecycle="partial" if resume else "strict") == expected
        else:
            kinds.add("replay")
            assert seqs == list(range(_seq(resume) + 1, _seq(resume) + 1 + len(seqs)))
        assert frames[-1][1]["type"] == "RUN_FINISHED"
    assert kinds == {"snapshot", "replay"}


# --- over HTTP on loopback ---


class _SmallBufferConnection(http.client.HTTPConnection):
    """An HTTP client whose socket has a small receive buffer, so a client that stops reading
    fills the server's send buffer quickly."""

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(self.timeout)
        sock.connect((self.host, self.port))
        self.sock = sock


class _Subscriber:
    """A real SSE subscriber on loopback that reads frame by frame (http.client)."""

    def __init__(self, url: str, last_event_id: str | None = None) -> None:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.conn = _SmallBufferConnection("127.0.0.1", port, timeout=60)
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        self.conn.request("GET", "/events", headers=headers)
        self.resp = self.conn.getresponse()
        self.body = b""

    def read_frames(self, n: int) -> None:
        while n > 0:
            line = self.resp.readline()
            assert line, "the stream ended early"
            self.body += line
            if line == b"\n":
                n -= 1

    def read_rest(self) -> bytes:
        self.body += self.resp.read()
        self.conn.close()
        return self.body


@pytest.fixture
def served() -> Iterator[tuple[RunStream, StreamServer]]:
    stream = _stream(window_events=100_000, window_bytes=1 << 30, queue_frames=32)
    server = StreamServer(stream)
    yield stream, server
    stream.finish()
    server.close()


def _big(step: int) -> dict[str, Any]:
    return _snapshot("big", {"steps": step, "blob": "x" * 65_536})


def _publish_until_stalled(stream: RunStream) -> int:
    """Publish 64 KiB snapshots one at a time until the one subscriber's connection stopped
    taking them (its backlog stays put: the server's write is blocked); the next step."""
    step, still = 1, 0
    while still < 5:
        stream.publish(_big(step))
        step += 1
        before = stream.backlog()
        threading.Event().wait(0.1)
        still = still + 1 if stream.backlog() == before and before[0][0] > 0 else 0
        assert step < 1000, "the subscriber's connection never filled up"
    return step


def _publish_until_dropped(stream: RunStream, first: int) -> int:
    """Publish 64 KiB snapshots (in a thread, so a blocked publisher fails the test) until the
    stream dropped a subscriber; returns the next step number."""
    step = first
    result: queue.Queue[int] = queue.Queue()

    def run() -> None:
        nonlocal step
        while stream.dropped == 0 and step < first + 2000:
            stream.publish(_big(step))
            step += 1
        result.put(step)

    publisher = threading.Thread(target=run, daemon=True)
    publisher.start()
    publisher.join(timeout=120)
    assert not publisher.is_alive(), "the publisher blocked on a subscriber that stopped reading"
    assert stream.dropped == 1, "the subscriber that stopped reading was never dropped"
    return result.get_nowait()


def test_an_http_subscriber_that_stops_reading_is_dropped_and_resumes(
    served: tuple[RunStream, StreamServer], tmp_path: Path
) -> None:
    stream, server = served
    stream.publish(_snapshot("a", {"steps": 0}))
    stalled = _Subscriber(server.url)
    stalled.read_frames(2)  # RUN_STARTED and the snapshot; then it stops reading
    assert server.wait_for_subscribers(1, timeout=60)
    step = _publish_until_dropped(stream, _publish_until_stalled(stream))
    assert stream.subscribers == 0
    stream.publish(_delta("a", 5))  # published after the drop: never queued for it
    cut = stalled.read_rest()
    assert cut.endswith(RESYNC_COMMENT)
    frames = _parse(cut)
    seqs = [_seq(f[0]) for f in frames]
    assert seqs[1:] == list(range(seqs[1], seqs[1] + len(seqs) - 1))  # a prefix, no gap
    assert seqs[-1] < step + 1  # it fell behind: the last events never reached it
    # The EventSource reconnects with the last id it received: in the window, so replayed.
    resumed = _Subscriber(server.url, frames[-1][0])
    resumed.read_frames(1)
    stream.finish()
    rest = resumed.read_rest()
    rest_frames = _parse(rest)
    assert _seq(rest_frames[0][0]) == seqs[-1] + 1
    assert rest_frames[-1][1]["type"] == "RUN_FINISHED"
    assert _rebuilt(cut, rest) == _expected(stream)
    validate_capture(cut + rest, tmp_path / "resumed.sse")


def test_an_http_resume_outside_the_window_resyncs(tmp_path: Path) -> None:
    stream = _stream(window_events=8, queue_frames=32)
    server = StreamServer(stream)
    try:
        stream.publish(_snapshot("a", {"steps": 0}))
        stalled = _Subscriber(server.url)
        stalled.read_frames(2)
        assert server.wait_for_subscribers(1, timeout=60)
        _publish_until_dropped(stream, _publish_until_stalled(stream))
        cut = stalled.read_rest()
        last = _parse(cut)[-1][0]
        assert cut.endswith(RESYNC_COMMENT)
        resumed = _Subscriber(server.url, last)
        resumed.read_frames(1)
        stream.publish(_delta("a", 9))
        stream.finish()
        rest = resumed.read_rest()
        types = [f[1]["type"] for f in _parse(rest)]
        assert types == ["MESSAGES_SNAPSHOT", "ACTIVITY_DELTA", "RUN_FINISHED"]
        assert _rebuilt(cut, rest) == _expected(stream)
        validate_capture(cut + rest, tmp_path / "resynced.sse")
        # After the end, a resume at the last event has nothing left: 204 stops an EventSource.
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/events", headers={"Last-Event-ID": str(stream.last_event_id)})
        assert conn.getresponse().status == 204
        conn.close()
    finally:
        server.close()


def test_a_peer_that_never_reads_again_is_closed_after_the_write_timeout() -> None:
    stream = _stream(write_timeout_s=0.5)
    server = StreamServer(stream)
    try:
        stalled = _Subscriber(server.url)
        stalled.read_frames(2)
        assert server.wait_for_subscribers(1, timeout=60)
        step = 1
        while stream.subscribers and step < 200:  # slower than the queue bound would drop it
            stream.publish(_big(step))
            step += 1
            threading.Event().wait(0.05)
        # The server's write made no progress for 0.5 s: it closed the connection itself.
        assert stream.subscribers == 0 and stream.dropped == 0
        try:
            body = stalled.read_rest()
        except (ConnectionResetError, http.client.IncompleteRead):
            body = b""
        assert not body.endswith(RESYNC_COMMENT)
        assert _parse(body)[-1][0] != stream.last_event_id  # it never got the last frames
    finally:
        server.close()


def test_clients_that_go_away_at_once_are_let_go_within_seconds_not_at_a_later_write() -> None:
    """Fifty clients close together while the run is quiet: each subscription (and the thread
    serving it) ends within a few seconds. Before, each waited for its next keepalive (10 s)
    and then for a write that failed, so a burst held every thread for up to 20 s."""
    import time

    stream = _stream()
    server = StreamServer(stream)
    host, port = server._httpd.server_address[:2]
    clients = []
    try:
        for _ in range(50):
            sock = socket.create_connection((str(host), int(port)))
            sock.sendall(f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            clients.append(sock)
        for sock in clients:  # each subscribed: its headers and first frames came
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.0 200 ")
        deadline = time.monotonic() + 10
        while stream.subscribers < 50:
            assert time.monotonic() < deadline, stream.subscribers
            time.sleep(0.01)
        closed = time.monotonic()
        for sock in clients:
            sock.close()
        while stream.subscribers:
            assert time.monotonic() - closed < 4.0, f"{stream.subscribers} still held"
            time.sleep(0.05)
    finally:
        for sock in clients:
            sock.close()
        stream.finish()
        server.close()


def test_connections_past_the_listeners_bound_are_answered_503_not_a_thread_each() -> None:
    """Each SSE connection held a thread of the daemon, with no bound: 800 idle clients took
    800 threads. Past `max_connections` one more is answered 503 `listener_busy` at once, and
    a closed connection frees its place."""
    stream = _stream()
    server = StreamServer(stream)
    server._httpd.max_connections = 3
    held: list[_Subscriber] = []
    try:
        for _ in range(3):
            sub = _Subscriber(server.url)
            sub.read_frames(1)
            held.append(sub)
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/events")
        busy = conn.getresponse()
        assert busy.status == 503 and busy.getheader("Retry-After") == "5"
        assert json.loads(busy.read())["code"] == "listener_busy"
        conn.close()
        gone = held.pop()
        gone.resp.close()
        gone.conn.close()
        for _ in range(200):  # its thread ends once it sees its client gone
            if server._httpd._open < 3:
                break
            threading.Event().wait(0.05)
        assert server._httpd._open < 3
        again = _Subscriber(server.url)
        again.read_frames(1)
        held.append(again)
    finally:
        stream.finish()
        for sub in held:
            sub.resp.close()
            sub.conn.close()
        server.close()
