"""The live WebSocket transport on loopback, with a real client library (`websockets`): frame
shape, resume inside and past the replay window, epoch change, a slow consumer closed with 1013,
and auth (header, subprotocol, cookie; missing or wrong token, a token in the URL, a bad Origin).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from tether._core import LivePublisher
from tether.live import Canonical, LiveClient, PublisherSource, frame_schema, schema_registry
from tether.live.ws import (
    CLOSE_RESUME_UNAVAILABLE,
    CLOSE_TOO_SLOW,
    LIVE_SUBPROTOCOL,
    LiveCredentials,
    LiveRefused,
    LiveServer,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

WS, SESSION, TURN = "ws", "world-1", "receipt:world-1/run/1/tok"
MSG = "toolcall:world-1/sim/a1"
TOKEN, ORIGIN = "s3cret-token", "http://console.local"


def authorize(creds: LiveCredentials) -> str | None:
    if creds.token == TOKEN or creds.cookies.get("tether_session") == "sess-1":
        return "alice"
    return None


class Recorder:
    """A source whose canonical record is the overlay-form record of everything published (the
    test's own model: the trace text per message, as sent before the cap)."""

    def __init__(self, epoch: int = 7, **options: Any) -> None:
        self.source = PublisherSource(LivePublisher(WS, SESSION, epoch=epoch, **options))
        self.text: dict[str, str] = {}

    def say(self, text: str, mid: str = MSG, now: int = 5) -> None:
        self.source.tool_output(mid, TURN, text, now_ms=now)
        self.text[mid] = self.text.get(mid, "") + text
        self.source.flush()

    def canonical(self) -> Canonical:
        messages = {
            mid: {
                "turnId": TURN,
                "role": "tool",
                "kind": "tool_call",
                "payload": {"output": {"text": self.source.publisher.capped_output(t)}},
            }
            for mid, t in self.text.items()
        }
        record = {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "runtime": None,
            "turns": {},
            "messages": messages,
            "interactions": {},
            "audits": {},
        }
        return Canonical(self.source.epoch, self.source.seq, record)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def server(rec: Recorder) -> Iterator[LiveServer]:
    with LiveServer(
        rec.source,
        authorize=authorize,
        allowed_origins=[ORIGIN, None],
        window=8,
        buffer_bytes=256 * 1024,
        heartbeat_s=None,
    ) as srv:
        yield srv


def client(url: str, rec: Recorder, **kw: Any) -> LiveClient:
    kw.setdefault("token", TOKEN)
    return LiveClient(url, rec.canonical, workspace_id=WS, agent_session_id=SESSION, **kw)


def output(c: LiveClient) -> str | None:
    m = c.overlay.message(MSG)
    return None if m is None else m["payload"]["output"]["text"]


async def wait_subscribers(server: LiveServer, n: int) -> None:
    for _ in range(500):
        if server.subscribers >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{server.subscribers} subscribers, expected {n}")


def test_frames_carry_epoch_seq_and_deliveries(server: LiveServer, rec: Recorder) -> None:
    validator = jsonschema.Draft202012Validator(frame_schema(), registry=schema_registry())

    async def main() -> list[dict[str, Any]]:
        async with connect(
            server.url,
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            subprotocols=[LIVE_SUBPROTOCOL],  # type: ignore[list-item]
        ) as ws:
            assert ws.subprotocol == LIVE_SUBPROTOCOL
            await wait_subscribers(server, 1)
            rec.say("héllo ")
            rec.say("wörld\n")
            return [json.loads(await asyncio.wait_for(ws.recv(), 5)) for _ in range(2)]

    frames = asyncio.run(main())
    for f in frames:
        validator.validate(f)
        assert set(f) == {"epoch", "seq", "deliveries"} and f["epoch"] == 7
        assert all(set(d) == {"kind", "payload"} and d["kind"] == "event" for d in f["deliveries"])
    assert [f["seq"] for f in frames] == [1, 2]
    first, second = (f["deliveries"][0]["payload"]["data"]["toolOutput"] for f in frames)
    assert first == {"operation": "set", "text": "héllo "}
    assert second == {
        "operation": "append_text",
        "text": "wörld\n",
        "offsetBytes": len("héllo ".encode()),
    }


def test_a_client_applies_frames_and_resumes_inside_the_window(
    server: LiveServer, rec: Recorder
) -> None:
    async def main() -> LiveClient:
        c = client(server.url, rec)
        await c.connect()
        await wait_subscribers(server, 1)
        rec.say("one\n")
        await c.receive(5)  # the first frame is an epoch change to it: one re-read
        rec.say("two\n")
        await c.receive(5)
        assert c.rereads == 1 and c.position == (7, 2)
        await c.close()
        rec.say("three\n")
        rec.say("four\n")
        await c.connect()  # resumes from seq 2: frames 3 and 4 come from the window
        for _ in range(2):
            await c.receive(5)
        await c.close()
        return c

    c = asyncio.run(main())
    assert c.rereads == 1 and dict(c.faults) == {"epoch_change": 1}
    assert output(c) == "one\ntwo\nthree\nfour\n"
    assert c.snapshot() == rec.canonical().record


def test_a_resume_past_the_window_is_told_to_reread(server: LiveServer, rec: Recorder) -> None:
    async def main() -> LiveClient:
        c = client(server.url, rec)
        rec.say("a\n")
        c.apply_canonical(rec.canonical())  # holds seq 1
        for i in range(12):  # the window keeps 8
            rec.say(f"{i}\n")
        # run() connects from seq 1, is closed with 4001, re-reads, reconnects from the read.
        stop = asyncio.Event()
        task = asyncio.ensure_future(c.run(stop))
        for _ in range(500):
            if c.rereads >= 2 and server.subscribers == 1:
                break
            await asyncio.sleep(0.01)
        rec.say("tail\n")
        for _ in range(500):
            if output(c) and output(c).endswith("tail\n"):  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task
        return c

    c = asyncio.run(main())
    assert dict(c.closes) == {CLOSE_RESUME_UNAVAILABLE: 1} and c.rereads == 2
    assert c.snapshot() == rec.canonical().record
    assert output(c) == "a\n" + "".join(f"{i}\n" for i in range(12)) + "tail\n"


def test_an_epoch_change_makes_the_client_reread(rec: Recorder) -> None:
    async def main() -> tuple[LiveClient, Recorder]:
        kw: dict[str, Any] = {"authorize": authorize, "allowed_origins": [None]}
        first = LiveServer(rec.source, heartbeat_s=None, **kw)
        c = client(first.url, rec)
        await c.connect()
        await wait_subscribers(first, 1)
        rec.say("before restart\n")
        await c.receive(5)
        assert c.rereads == 1
        await asyncio.to_thread(first.close)  # (this loop must keep running: the client closes)
        # The daemon restarts: a new publisher, a new epoch, its state re-read from the records.
        again = Recorder(epoch=8)
        again.say("before restart\n")  # the new feed's first sync rebuilds the whole trace
        with LiveServer(again.source, heartbeat_s=None, **kw) as second:
            c.url, c.reread = second.url, again.canonical
            c.conn = None
            with pytest.raises(ConnectionClosed):  # the old position is of another epoch
                await c.connect()
                await c.receive(5)
            await c.reconcile()
            assert c.position == (8, 1)
            await c.connect()
            await wait_subscribers(second, 1)
            again.say("after restart\n")
            await c.receive(5)
            await c.close()
        return c, again

    c, again = asyncio.run(main())
    assert c.closes[CLOSE_RESUME_UNAVAILABLE] == 1 and c.rereads == 2
    assert c.snapshot() == again.canonical().record
    assert output(c) == "before restart\nafter restart\n"


def test_a_consumer_too_slow_for_its_buffer_is_closed_with_1013(
    server: LiveServer, rec: Recorder
) -> None:
    # A small receive buffer of its own: the kernel's autotuning (up to tcp_rmem's maximum,
    # 32 MiB here) could otherwise hold nearly every byte sent and no buffer would fill.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", server.port))
    sock.setblocking(False)

    async def main() -> tuple[int | None, int]:
        async with connect(
            server.url,
            sock=sock,
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            max_queue=1,
            compression=None,
        ) as ws:
            await wait_subscribers(server, 1)
            big = "x" * 100_000
            for i in range(400):  # 40 MB the client does not read (one trace each: no cap)
                rec.say(big, mid=f"toolcall:world-1/sim/b{i}")
                if server.dropped:
                    break
            # The server fans out on its own thread, maybe after the last say: the client
            # still reads nothing (this loop is blocked, deliberately) until it is dropped, or
            # it would drain what the server sends and never fall behind.
            deadline = time.monotonic() + 30
            while not server.dropped and time.monotonic() < deadline:
                time.sleep(0.01)
            received = 0
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 30)
                    received += 1
            except ConnectionClosed as exc:
                return (None if exc.rcvd is None else exc.rcvd.code), received

    code, received = asyncio.run(main())
    assert server.dropped == 1
    assert code == CLOSE_TOO_SLOW
    assert received < 400


def handshake(server: LiveServer, url: str | None = None, **kw: Any) -> int:
    """The HTTP status of a connection attempt (101 when it opened)."""

    async def main() -> int:
        try:
            async with connect(url or server.url, **kw):
                return 101
        except InvalidStatus as exc:
            return int(exc.response.status_code)

    return asyncio.run(main())


def test_auth_by_header_subprotocol_or_cookie_and_every_refusal(server: LiveServer) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert handshake(server, additional_headers=bearer, origin=ORIGIN) == 101
    assert handshake(server, subprotocols=[LIVE_SUBPROTOCOL, f"tether.bearer.{TOKEN}"]) == 101
    assert handshake(server, additional_headers={"Cookie": "tether_session=sess-1"}) == 101
    # Refused: no credentials, a wrong token, a token in the URL (even with a good header),
    # another parameter, a bad Origin.
    assert handshake(server) == 401
    assert handshake(server, additional_headers={"Authorization": "Bearer nope"}) == 401
    assert handshake(server, additional_headers={"Authorization": f"Basic {TOKEN}"}) == 400
    assert handshake(server, subprotocols=[LIVE_SUBPROTOCOL, "tether.bearer.nope"]) == 401
    # A token subprotocol offered alone: the answer could select none of the offered ones (a
    # browser then fails the handshake) without echoing the token, so it is refused unread.
    assert handshake(server, subprotocols=[f"tether.bearer.{TOKEN}"]) == 400
    assert handshake(server, subprotocols=["tether.bearer.nope"]) == 400
    assert handshake(server, server.url + f"?token={TOKEN}", additional_headers=bearer) == 400
    assert handshake(server, server.url + f"?access_token={TOKEN}") == 400
    assert handshake(server, server.url + "?epoch=1", additional_headers=bearer) == 400
    assert handshake(server, additional_headers=bearer, origin="http://evil.example") == 403


def test_a_request_without_origin_is_refused_unless_allowed(rec: Recorder) -> None:
    with LiveServer(
        rec.source, authorize=authorize, allowed_origins=[ORIGIN], heartbeat_s=None
    ) as srv:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert handshake(srv, additional_headers=bearer) == 403
        assert handshake(srv, additional_headers=bearer, origin=ORIGIN) == 101


def test_heartbeats_let_a_subscriber_see_a_trailing_loss(rec: Recorder) -> None:
    async def main() -> LiveClient:
        with LiveServer(
            rec.source, authorize=authorize, allowed_origins=[None], heartbeat_s=0.05
        ) as srv:
            c = client(srv.url, rec)
            await c.connect()
            for _ in range(3):
                await c.receive(5)
            await c.close()
        return c

    c = asyncio.run(main())
    assert c.frames == 3 and c.rereads == 1  # the first heartbeat is its epoch change
    assert c.subscriber.last_seq >= 3


def test_server_options_are_checked(rec: Recorder) -> None:
    for bad in ({"window": 0}, {"buffer_bytes": -1}, {"heartbeat_s": 0}, {"path": "live"}):
        with pytest.raises(ValueError):
            LiveServer(rec.source, authorize=authorize, allowed_origins=[None], **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LiveClient("ws://x/live?token=1", rec.canonical, workspace_id=WS, agent_session_id=SESSION)


def test_a_client_closed_with_1013_resumes_and_ends_equal_to_the_record(
    server: LiveServer, rec: Recorder
) -> None:
    async def main() -> LiveClient:
        c = client(server.url, rec)
        c.apply_canonical(rec.canonical())
        await c.connect()
        # A small, fixed receive buffer (no autotuning, which on this kernel may reach tens of
        # MiB): what the kernel absorbs is bounded, so the server's own bound decides.
        assert c.conn is not None
        sock = c.conn.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        await wait_subscribers(server, 1)
        big = "y" * 100_000
        n = 0
        for _ in range(2000):  # this loop never awaits: the client reads nothing meanwhile
            rec.say(big, mid=f"toolcall:world-1/sim/c{n}")
            n += 1
            if server.dropped:
                break
            time.sleep(0.002)  # the server's loop thread fans the frame out meanwhile
        assert server.dropped == 1, "the server never dropped the slow subscriber"
        # More than the replay window after the drop: its resume is unavailable, so it re-reads.
        for _ in range(server.window + 2):
            rec.say(big, mid=f"toolcall:world-1/sim/c{n}")
            n += 1
        rec.say("after\n")
        stop = asyncio.Event()
        task = asyncio.ensure_future(c.run(stop))
        for _ in range(1000):
            if c.position == (rec.source.epoch, rec.source.seq) and not c.needs_reread:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task
        return c

    c = asyncio.run(main())
    assert server.dropped == 1 and c.closes[CLOSE_TOO_SLOW] == 1
    assert c.snapshot() == rec.canonical().record


def test_run_waits_out_a_429s_retry_after_and_then_connects(rec: Recorder) -> None:
    """A rate-limited address (another client's failed tokens) or a principal at its
    connection bound is refused 429 with ``Retry-After``: `run` waits that long and tries again,
    where it raised before (a reconnecting client that gave up on a lockout it did not cause)."""
    refused: list[float] = []

    def limited(creds: LiveCredentials) -> str | None:
        if len(refused) < 2:
            refused.append(time.monotonic())
            raise LiveRefused(429, "rate limited", {"Retry-After": "1"})
        return authorize(creds)

    async def main() -> tuple[LiveClient, float]:
        with LiveServer(
            rec.source, authorize=limited, allowed_origins=[None], heartbeat_s=None
        ) as srv:
            c = client(srv.url, rec)
            c.apply_canonical(rec.canonical())
            stop = asyncio.Event()
            task = asyncio.ensure_future(c.run(stop, retry_s=0.05))
            await wait_subscribers(srv, 1)
            connected = time.monotonic()
            rec.say("after the lockout\n")
            for _ in range(500):
                if output(c) == "after the lockout\n":
                    break
                await asyncio.sleep(0.01)
            stop.set()
            await task
            return c, connected

    c, connected = asyncio.run(main())
    assert c.retries["InvalidStatus"] == 2
    assert refused[1] - refused[0] >= 0.95  # the Retry-After, not the 0.05 s backoff
    assert connected - refused[1] >= 0.95
    assert output(c) == "after the lockout\n"
    assert c.snapshot() == rec.canonical().record


def test_run_still_raises_a_refused_token(rec: Recorder) -> None:
    async def main() -> None:
        with LiveServer(
            rec.source, authorize=authorize, allowed_origins=[None], heartbeat_s=None
        ) as srv:
            c = client(srv.url, rec, token="wrong")
            c.apply_canonical(rec.canonical())
            await asyncio.wait_for(c.run(asyncio.Event()), 10)

    with pytest.raises(InvalidStatus) as caught:
        asyncio.run(main())
    assert caught.value.response.status_code == 401


def _raw_upgrade(
    server: LiveServer,
    target: str | None = None,
    headers: tuple[str, ...] | list[str] = (),
    *,
    host: str | None = None,
    whole: bool = True,
) -> bytes:
    """The answer to one WebSocket upgrade sent as bytes (what no client library would send:
    a broken target, repeated headers, a foreign Host): ``target`` (default: the endpoint),
    ``headers`` as lines, ``host`` (default: the server's); read to the close, or (not
    ``whole``: an upgrade that succeeds keeps the connection) one read."""
    from urllib.parse import urlsplit

    where = urlsplit(server.url)
    host = host or f"{where.hostname}:{where.port}"
    request = (
        f"GET {target or where.path} HTTP/1.1\r\nHost: {host}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        + "".join(f"{line}\r\n" for line in headers)
        + "\r\n"
    )
    with socket.create_connection((str(where.hostname), int(where.port or 80)), 5) as c:
        c.sendall(request.encode())
        if not whole:
            return c.recv(4096)
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
    return answer


def test_a_target_no_url_could_be_is_refused_not_a_500(server: LiveServer) -> None:
    """``GET //[x/live`` names an authority with a broken IPv6 literal: the URL parser raised
    in the handshake (a 500 and a logged traceback); it is the endpoint's 404."""
    answer = _raw_upgrade(server, "//[x/live")
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:200]
    assert b"the live endpoint is" in answer


def test_two_origin_headers_are_refused_not_a_500(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two ``Origin`` headers made the handshake's lookup raise (a 500 and a logged traceback,
    before any credential was asked for); they are a 400 that names them."""
    for origins in ((ORIGIN, ORIGIN), (ORIGIN, "http://evil.example")):
        lines = [f"Authorization: Bearer {TOKEN}", *(f"Origin: {o}" for o in origins)]
        answer = _raw_upgrade(server, headers=lines)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"more than one Origin header" in answer
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_no_credential_reaches_a_debug_log_of_the_handshakes(
    server: LiveServer, rec: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG websockets logs every handshake header, on the server's logger and on the
    client's: a bearer token (header or subprotocol) and a session cookie were written out in
    full. Both loggers mask them; the other headers and offers stay."""
    caplog.set_level(logging.DEBUG)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert handshake(server, additional_headers=bearer, origin=ORIGIN) == 101
    assert handshake(server, subprotocols=[LIVE_SUBPROTOCOL, f"tether.bearer.{TOKEN}"]) == 101
    assert handshake(server, additional_headers={"Cookie": "tether_session=sess-1"}) == 101

    async def through_client(via: str) -> None:
        c = client(server.url, rec, token_via=via)
        await c.connect()
        await c.close()

    asyncio.run(through_client("header"))
    asyncio.run(through_client("subprotocol"))
    # (`handshake` is the test's own websockets client: its logger is websockets'.)
    said = [(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("tether")]
    leaked = [m for m in said if TOKEN in m[1] or "sess-1" in m[1]]
    assert leaked == []
    server_side = {m for name, m in said if name == "tether.live.ws"}
    client_side = {m for name, m in said if name == "tether.live.client"}
    for lines in (server_side, client_side):
        sent = "< " if lines is server_side else "> "
        assert f"{sent}Authorization: [REDACTED]" in lines, sorted(lines)
        assert f"{sent}Sec-WebSocket-Protocol: {LIVE_SUBPROTOCOL}, tether.bearer.[REDACTED]" in (
            lines
        ), sorted(lines)
    assert "< Cookie: [REDACTED]" in server_side
    assert any(m.startswith("< Host: ") for m in server_side)  # the others are still said


@pytest.mark.parametrize("query", ["token", "ToK%65n", "from=3&access_token"])
def test_a_token_in_the_url_is_refused_and_never_written_to_a_debug_log(
    server: LiveServer, caplog: pytest.LogCaptureFixture, query: str
) -> None:
    """A credential in the URL is refused (`secret_in_url`), and websockets logged the request
    line with it at DEBUG first: a planner's token in full. Its query is masked whole."""
    from urllib.parse import urlsplit

    caplog.set_level(logging.DEBUG)
    where = urlsplit(server.url)
    answer = _raw_upgrade(server, f"{where.path}?{query}={TOKEN}")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("tether")]
    assert [m for m in said if TOKEN in m] == []
    assert f"< GET {where.path}?[REDACTED] HTTP/1.1" in said, said


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "10.0.0.1"])
def test_a_foreign_host_header_is_refused_on_loopback_even_with_a_token(
    server: LiveServer, host: str
) -> None:
    """A page whose name was rebound to 127.0.0.1 (DNS rebinding) was switched to a
    WebSocket: the console and the SSE stream refuse such a `Host` on loopback, the live
    endpoint answered 101 to it with a valid token. It is a 403 now; a loopback one is not."""
    from urllib.parse import urlsplit

    lines = [f"Authorization: Bearer {TOKEN}", f"Origin: {ORIGIN}"]
    refused = _raw_upgrade(server, headers=lines, host=host, whole=False)
    assert refused.startswith(b"HTTP/1.1 403 "), refused[:200]
    assert b"loopback Host" in refused
    local = f"localhost:{urlsplit(server.url).port}"
    assert _raw_upgrade(server, headers=lines, host=local, whole=False).startswith(b"HTTP/1.1 101 ")


def test_a_connection_on_a_session_cookie_ends_with_its_session(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection admitted on a console session's cookie went on streaming after a logout
    (and past the session's expiry): its cookie was judged once, at the handshake. It is
    closed with 1008 once its session ends; a token's connection is not."""
    import tether.live.ws as ws

    monkeypatch.setattr(ws, "SESSION_CHECK_S", 0.05, raising=False)
    sessions = {"sess-1"}

    def by_session(creds: LiveCredentials) -> str | None:
        if creds.token == TOKEN or creds.cookies.get("tether_session") in sessions:
            return "alice"
        return None

    async def main(srv: LiveServer) -> tuple[int | None, bool]:
        cookie = await connect(srv.url, additional_headers={"Cookie": "tether_session=sess-1"})
        bearer = await connect(srv.url, additional_headers={"Authorization": f"Bearer {TOKEN}"})
        await asyncio.sleep(0.3)
        assert cookie.state.name == "OPEN"  # the session lives: so does its connection
        sessions.clear()  # logged out
        try:
            await asyncio.wait_for(cookie.wait_closed(), 5)
        finally:
            still = bearer.state.name == "OPEN"
            await bearer.close()
        return cookie.close_code, still

    with LiveServer(
        rec.source, authorize=by_session, allowed_origins=[None], heartbeat_s=None
    ) as srv:
        code, token_still_open = asyncio.run(main(srv))
    assert code == ws.CLOSE_SESSION_ENDED == 1008
    assert token_still_open


def test_a_frame_past_the_clients_cap_is_re_read_not_resumed_for_ever(rec: Recorder) -> None:
    """A frame larger than the client takes (the publisher packs up to 64 chunks of output in
    one) closed the connection (1009), and `run` resumed at the same seq, where the same frame
    came again, for ever: the overlay froze while the source went on. It re-reads instead."""
    import tether.live._client as client_module

    with LiveServer(
        rec.source,
        authorize=authorize,
        allowed_origins=[None],
        heartbeat_s=None,
        buffer_bytes=64 * 1024 * 1024,
    ) as srv:

        async def main() -> None:
            c = client(srv.url, rec)
            stop = asyncio.Event()
            task = asyncio.ensure_future(c.run(stop))
            await wait_subscribers(srv, 1)
            # Control characters: six bytes each in the frame's JSON. Output past a message's
            # 1 MiB cap is dropped, so four messages of it make one frame past the cap.
            big = "\x01" * (1 << 20)
            assert 4 * 6 * len(big) > client_module.MAX_FRAME_BYTES
            for m in range(4):
                mid = f"toolcall:world-1/sim/big{m}"
                for start in range(0, len(big), 100_000):
                    rec.source.tool_output(mid, TURN, big[start : start + 100_000], now_ms=5)
                rec.text[mid] = big
            rec.source.flush()
            rec.say("after")  # the stream goes on past the big frame
            deadline = time.monotonic() + 30
            while c.snapshot() != rec.canonical().record:
                assert time.monotonic() < deadline, (c.position, rec.source.seq, c.closes)
                await asyncio.sleep(0.05)
            stop.set()
            await task
            assert c.rereads >= 2  # the first read, and the one past the big frame

        asyncio.run(main())
