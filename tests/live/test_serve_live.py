"""The live-event WebSocket of `tether serve` (`tether.serve.live_mount`): a daemon subprocess
over an emulated DYNAMIXEL arm (its own process, a real pty), a `LiveClient` in another process
(real `websockets`), the canonical re-read through the daemon's control socket.

- a move submitted through the daemon is seen live at ``/live/<world>``: its trace (the
  commands the emulator received, in order) and its settlement; the overlay built from the
  frames equals the canonical record read through the daemon at the same position;
- a daemon restart is an epoch change: the client re-reads through the new daemon and
  converges, still showing the settled move;
- auth: no token, a wrong one, a bad Origin, a token in the URL,
  a cookie without the console's session check, rate limiting; off loopback without `[tls]`
  the daemon refuses to start (`insecure_listener`, exit 2), with it the endpoint is ``wss``;
- routing: one channel per name, bounded, idle ones closed (a reopened one is a new epoch).
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from tether._config import HostConfigError
from tether._core import LivePublisher
from tether.client import Client, ClientError
from tether.devices.credentials import hash_secret
from tether.live import PublisherSource
from tether.live.ws import LiveCredentials, LiveRefused, LiveServer
from tether.serve.config import parse_serve
from tether.testing._ports import free_port
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests._secrets import OPERATOR, PLANNER

sys.path.insert(0, str(Path(__file__).parents[1] / "adapters"))
from _dxl_setup import (
    GOALS,
    EmulatorProcess,
    emulator_process,
    target_actions,
    write_config,
)

KIND = "physical_ai.robot_move.absolute"
WORLD = "lab"
EFFECTFUL = ("write", "reg_write", "action", "sync_write", "reboot", "factory_reset")
ORIGIN = "https://gui.example"


def live_config(tmp: Path, url: str, *, live: str, extra: str = "", serve: str = "") -> Path:
    path = write_config(tmp, url)
    path.write_text(
        path.read_text()
        + "\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\n"
        + f'live = "{live}"\nlive_origins = ["{ORIGIN}"]\n'
        + serve
        + f'\n[planners.gui]\ntoken = "{hash_secret(PLANNER)}"\nrole = "planner"\n'
        + f'\n[operators.olga]\ncredential = "{hash_secret(OPERATOR)}"\n'
        + extra
    )
    return path


@contextmanager
def daemon(config: Path, log: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`tether serve` until the block ends (SIGTERM); its ready line. Logs go to `log`."""
    with log.open("a") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, log.read_text()
        yield proc, json.loads(line)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[EmulatorProcess]:
    with emulator_process(tmp_path) as emulator:
        yield emulator


# The subscriber: another process, a LiveClient built against the running daemon. It reports
# each phase as one JSON line and waits for the test's word on stdin between them.
SUBSCRIBER = r"""
import asyncio, json, sys, time
from tether.client import Client
from tether.live import Canonical, LiveClient

config, world, message_id, token_via = sys.argv[1:5]
token = sys.stdin.readline().strip()  # a secret never goes in argv


def say(**doc):
    print(json.dumps(doc), flush=True)


TASK = []


async def until(check, seconds=90.0):
    deadline = time.monotonic() + seconds
    while not check():
        if TASK and TASK[0].done():
            TASK[0].result()  # the client's run ended: its error, if any
            raise SystemExit(f"the client stopped before {check.__name__}")
        if time.monotonic() > deadline:
            m = message(CLIENT[0]) if CLIENT else None
            raise SystemExit(
                f"timed out: {check.__name__}: message {m and m.get('status')}, position "
                f"{CLIENT and CLIENT[0].position}, faults {CLIENT and dict(CLIENT[0].faults)}, "
                f"rereads {CLIENT and CLIENT[0].rereads}, frames {CLIENT and CLIENT[0].frames}, "
                f"turns {CLIENT and CLIENT[0].snapshot()['turns']}"
            )
        await asyncio.sleep(0.02)


CLIENT = []


async def converged(c, client):
    # The canonical record at (epoch, seq), read through the daemon; the overlay once it
    # holds every frame up to that seq (without re-reading: built from the frames).
    deadline = time.monotonic() + 60
    while True:
        doc = await asyncio.to_thread(client.live_canonical, world)
        canon = Canonical(doc["epoch"], doc["seq"], doc["record"])
        rereads = c.rereads

        def caught_up():
            p = c.position
            return p is not None and p[0] == canon.epoch and p[1] >= canon.seq

        await until(caught_up)
        if c.snapshot() == canon.record and c.rereads == rereads:
            return canon
        if time.monotonic() > deadline:
            say(phase="diverged", overlay=c.snapshot(), canonical=canon.record)
            raise SystemExit("the overlay never equalled the canonical record")
        await asyncio.sleep(0.2)


def message(c):
    return c.overlay.message(message_id)


async def main():
    client = Client(config=config)
    c = LiveClient.for_daemon(client, world, token=token, token_via=token_via)
    stop = asyncio.Event()
    task = asyncio.create_task(c.run(stop))
    TASK.append(task)
    CLIENT.append(c)

    def connected():
        return c.conn is not None and c.position is not None

    await until(connected)
    say(phase="connected", url=c.url)

    def settled():
        m = message(c)
        turns = c.snapshot()["turns"]
        return (
            m is not None and m.get("status") == "completed"
            and any(t.get("phase") == "settled" for t in turns.values())
        )

    await until(settled)
    canon = await converged(c, client)
    m = message(c)
    say(phase="settled", trace=m["payload"]["output"]["text"], status=m["status"],
        epoch=canon.epoch, rereads=c.rereads, faults=dict(c.faults))
    await asyncio.to_thread(sys.stdin.readline)  # the daemon was restarted
    first_epoch = canon.epoch

    def new_epoch():
        return c.position is not None and c.position[0] != first_epoch and not c.needs_reread

    await until(new_epoch)
    canon = await converged(c, client)
    m = message(c)
    say(phase="converged", epoch=canon.epoch, rereads=c.rereads, status=m and m["status"],
        trace=m and m["payload"]["output"]["text"], closes=dict(c.closes),
        retries=dict(c.retries))
    stop.set()
    await task


asyncio.run(main())
"""


def read_phase(proc: subprocess.Popen[str], timeout: float = 90.0) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the subscriber said nothing"
    line = proc.stdout.readline()
    if not line:
        err = Path(str(proc.args[1])).with_name("subscriber.stderr")  # type: ignore[index]
        raise AssertionError(f"the subscriber ended ({proc.wait()}): {err.read_text()[-3000:]}")
    doc: dict[str, Any] = json.loads(line)
    assert doc.get("phase") != "diverged", doc
    return doc


#: A trace names a write by the register it sets; on the wire it is a WRITE.
WIRE = {"profile_velocity": "write", "torque_enable": "write"}


def sent_commands(trace: str) -> list[tuple[str, int]]:
    """(wire instruction, id) of each command a trace says was sent, in order."""
    found = re.findall(r"^attempt \d+ sent ([a-z_]+):.*?\bid=(\d+)", trace, flags=re.M)
    return [(WIRE.get(name, name), int(i)) for name, i in found]


def wire_commands(journal: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(instruction, id) of each effectful frame the emulator received, in order (a
    broadcast ACTION, journaled once per servo, is one frame to id 254)."""
    out: list[tuple[str, int]] = []
    for e in journal:
        if e["instruction"] not in EFFECTFUL:
            continue
        if e["instruction"] == "action":
            if out[-1:] != [("action", 254)]:
                out.append(("action", 254))
            continue
        out.append((e["instruction"], int(e["id"])))
    return out


@contextmanager
def subscriber(tmp: Path, *argv: str) -> Iterator[subprocess.Popen[str]]:
    """The subscriber script in its own process (killed if the block fails)."""
    with (tmp / "subscriber.stderr").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(tmp / "subscriber.py"), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


@pytest.mark.parametrize("port", ["fixed", "any"])
def test_a_move_through_the_daemon_is_seen_live_and_a_restart_converges(
    tmp_path: Path, emu: EmulatorProcess, port: str
) -> None:
    """With `live = "HOST:0"` (the default) the restarted daemon serves on another port: the
    client finds it in the daemon's record, never retrying the old one for ever."""
    live = f"127.0.0.1:{free_port() if port == 'fixed' else 0}"
    config = live_config(tmp_path, emu.path, live=live)
    log = tmp_path / "daemon.stderr"
    (tmp_path / "subscriber.py").write_text(SUBSCRIBER)
    message_id = f"toolcall:{WORLD}/{KIND}/move-1"
    with ExitStack() as stack:
        with daemon(config, log) as (_, ready):
            assert ready["live"].startswith("ws://127.0.0.1:") and ready["live"].endswith("/live")
            assert Client(config=config).status()["daemon"]["live"] == ready["live"]
            # (the header is the auth test's; this one sends its token as a subprotocol)
            sub = stack.enter_context(
                subscriber(tmp_path, str(config), WORLD, message_id, "subprotocol")
            )
            tell(sub, PLANNER)  # a secret never goes in argv
            assert read_phase(sub)["url"] == f"{ready['live']}/{WORLD}"
            # Submitted after the subscriber is connected: everything it sees came live.
            client = Client(config=config)
            view = client.submit(
                WORLD, "move-1", KIND, {"robot": "arm", "targets": {"a": 0.5, "b": -0.3}}
            )
            views = list(client.watch(view["key"], timeout=60))
            assert views[-1]["state"] == "done", views[-1]
            seen = read_phase(sub)
            assert seen["phase"] == "settled" and seen["status"] == "completed"
            trace = seen["trace"]
            # The trace's sent commands are what the emulator received, in order.
            received = wire_commands(emu.journal())
            assert sent_commands(trace) == received and ("action", 254) in received
            assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
            assert trace.startswith("admitted by tick ") and "move arm to a=0.5 rad" in trace
            assert trace.splitlines()[-1].startswith("settled, observed by tick")
        # A restart: another feed, another epoch. The client reconnects, is told its position
        # is gone (4001), re-reads through the new daemon and converges on the settled move.
        with daemon(config, log) as (_, again):
            assert (again["live"] == ready["live"]) is (port == "fixed"), (again, ready)
            tell(sub, "restarted")
            done = read_phase(sub)
            assert done["phase"] == "converged" and done["epoch"] != seen["epoch"]
            assert done["rereads"] > seen["rereads"] and done["status"] == "completed"
            # The new feed rebuilt the trace from the catalog and the journal: the same
            # commands; only the live-only claim line (the catalog's current claim, gone once
            # settled) is not in it.
            assert sent_commands(done["trace"]) == sent_commands(trace)
            rebuilt = done["trace"].splitlines()
            assert rebuilt == [ln for ln in trace.splitlines() if " claimed to " not in ln]
            assert sub.wait(timeout=60) == 0
            assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def _refused(url: str, **kw: Any) -> int:
    async def attempt() -> int:
        try:
            async with connect(url, proxy=None, **kw):
                return 101
        except InvalidStatus as exc:
            return int(exc.response.status_code)

    return asyncio.run(attempt())


def test_the_endpoint_requires_a_principal_that_may_watch_and_an_allowed_origin(
    tmp_path: Path,
) -> None:
    config = live_config(tmp_path, "/dev/null-unused", live="127.0.0.1:0")
    with daemon(config, tmp_path / "daemon.stderr") as (_, ready):
        url = f"{ready['live']}/{WORLD}"
        bearer = {"Authorization": f"Bearer {PLANNER}"}

        async def opened(**kw: Any) -> tuple[str | None, dict[str, Any]]:
            async with connect(url, proxy=None, **kw) as ws:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                return ws.subprotocol, frame

        # A planner's token in the header, or in a subprotocol (selected: never echoed).
        proto, frame = asyncio.run(opened(additional_headers=bearer))
        assert set(frame) == {"epoch", "seq", "deliveries"} and proto is None
        proto, frame = asyncio.run(
            opened(subprotocols=["tether.live.v1", f"tether.bearer.{PLANNER}"])
        )
        assert proto == "tether.live.v1"
        # A browser page of an allowed Origin; another Origin is refused even with a token.
        asyncio.run(opened(additional_headers=bearer, origin=ORIGIN))
        assert _refused(url, additional_headers=bearer, origin="https://evil.example") == 403
        # No principal: refused on loopback too; a cookie is no credential without the
        # console's session check.
        assert _refused(url) == 401
        assert _refused(url, additional_headers={"Cookie": "tether_session=s1"}) == 401
        # Any principal may read device output: an operator's credential opens it too.
        asyncio.run(opened(additional_headers={"Authorization": f"Bearer {OPERATOR}"}))
        # Nothing but epoch and seq in the URL: a token there is refused before it is read.
        assert _refused(f"{url}?token=not-a-secret", additional_headers=bearer) == 400
        assert _refused(f"{ready['live']}/", additional_headers=bearer) == 404
        assert _refused(f"{ready['live']}/bad%20world", additional_headers=bearer) == 404
        # The canonical read through the control socket names the same session.
        doc = Client(config=config).live_canonical(WORLD)
        assert doc["record"]["agentSessionId"] == WORLD and doc["world"] == WORLD
        with pytest.raises(ClientError) as info:
            Client(config=config).live_canonical("bad world")
        assert info.value.code == "bad_request"
        # Wrong tokens are rate-limited per peer address.
        codes = [
            _refused(url, additional_headers={"Authorization": "Bearer wrong-token-guess"})
            for _ in range(6)
        ]
        assert codes[:5] == [401] * 5 and codes[5] == 429
        assert _refused(url, additional_headers=bearer) == 429  # locked out: that address
    assert PLANNER not in (tmp_path / "daemon.stderr").read_text()


def test_off_loopback_the_endpoint_needs_tls_and_then_is_wss(tmp_path: Path) -> None:
    import ssl

    from tests._listeners import make_cert, require_non_loopback_address

    address = require_non_loopback_address()
    plain = live_config(tmp_path, "/dev/null-unused", live=f"{address}:0")
    refused = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--config", str(plain)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert "insecure_listener" in refused.stderr and "Traceback" not in refused.stderr
    assert (
        refused.stderr.strip().count("\n") == 0
        or "insecure_listener" in (refused.stderr.strip().splitlines()[-1])
    )
    cert = make_cert(tmp_path / "tls", ips=(address,))
    (tmp_path / "tls_host").mkdir()
    config = live_config(
        tmp_path / "tls_host",
        "/dev/null-unused",
        live=f"{address}:0",
        extra=f'\n[tls]\ncert = "{cert.cert}"\nkey = "{cert.key}"\n',
    )
    with daemon(config, tmp_path / "daemon.stderr") as (_, ready):
        assert ready["live"].startswith(f"wss://{address}:")
        trust = ssl.create_default_context(cafile=str(cert.cert))
        url = f"{ready['live']}/{WORLD}"

        async def first_frame() -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {PLANNER}"}
            async with connect(url, ssl=trust, proxy=None, additional_headers=headers) as ws:
                doc: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
                return doc

        assert set(asyncio.run(first_frame())) == {"epoch", "seq", "deliveries"}
        assert _refused(url, ssl=trust) == 401


def test_live_off_serves_nothing_and_the_canonical_read_says_so(tmp_path: Path) -> None:
    config = live_config(tmp_path, "/dev/null-unused", live="off")
    with daemon(config, tmp_path / "daemon.stderr") as (_, ready):
        assert ready["live"] is None
        with pytest.raises(ClientError) as info:
            Client(config=config).live_canonical(WORLD)
        assert info.value.code == "live_off"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ({"live": "127.0.0.1"}, "bad_live"),
        ({"live": "nowhere:80"}, "bad_live"),
        ({"live_origins": ["https://gui.example/"]}, "bad_live_origins"),
        ({"live_origins": ["HTTPS://GUI.example"]}, "bad_live_origins"),
        ({"live_origins": ["http://[::1"]}, "bad_live_origins"),
        ({"live_origins": ["*"]}, "bad_live_origins"),
        ({"live_origins": ["null"]}, "bad_live_origins"),
        ({"live_origins": "https://gui.example"}, "wrong_type"),
        ({"live_origin": ["https://gui.example"]}, "unknown_key"),
    ],
)
def test_a_bad_live_setting_is_a_coded_error(raw: dict[str, object], code: str) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_serve(raw, state_dir=Path("/srv/state"), robots=1)
    assert info.value.code == code


def test_the_live_defaults_are_loopback_any_port_and_no_browser_origin() -> None:
    serve = parse_serve({}, state_dir=Path("/srv/state"), robots=1)
    assert serve.live == ("127.0.0.1", 0) and serve.live_origins == ()
    other = parse_serve(
        {"live": "off", "live_origins": [ORIGIN, "http://localhost:5173"]},
        state_dir=Path("/srv/state"),
        robots=1,
    )
    assert other.live is None and other.live_origins == (ORIGIN, "http://localhost:5173")


# --- routing, in one process: a channel per name, bounded, idle ones closed ---


class Sources:
    """Routed sources: each name a publisher of its own (an unknown name is a 404)."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []

    def open(self, name: str) -> PublisherSource:
        if not name.startswith("w"):
            raise LiveRefused(404, f"no world {name}")
        self.opened.append(name)
        return PublisherSource(LivePublisher("ws", name, epoch=len(self.opened)))

    def close(self, name: str, source: Any) -> None:
        self.closed.append(name)


def test_a_routed_server_opens_one_channel_per_name_bounded_and_closes_idle_ones() -> None:
    sources = Sources()
    headers = {"Authorization": "Bearer t"}
    with LiveServer(
        sources=sources,
        authorize=lambda c: "p" if c.token == "t" else None,
        allowed_origins=[None],
        heartbeat_s=0.05,
        max_channels=2,
        idle_s=0.5,
    ) as server:

        async def main() -> None:
            with pytest.raises(InvalidStatus) as info:
                await connect(server.url_for("nope"), additional_headers=headers, proxy=None)
            assert info.value.response.status_code == 404 and sources.opened == []
            a = await connect(server.url_for("w1"), additional_headers=headers, proxy=None)
            b = await connect(server.url_for("w2/x"), additional_headers=headers, proxy=None)
            fa, fb = json.loads(await a.recv()), json.loads(await b.recv())
            assert (fa["epoch"], fb["epoch"]) == (1, 2)  # each channel its own source
            assert sources.opened == ["w1", "w2/x"]
            # Both open channels have a subscriber: a third is refused, not evicted.
            with pytest.raises(InvalidStatus) as info:
                await connect(server.url_for("w3"), additional_headers=headers, proxy=None)
            assert info.value.response.status_code == 503
            with pytest.raises(LiveRefused):
                server.channel("w3")
            # A second subscriber of w1 shares its channel (same epoch, no new source).
            a2 = await connect(server.url_for("w1"), additional_headers=headers, proxy=None)
            assert json.loads(await a2.recv())["epoch"] == 1 and len(sources.opened) == 2
            await b.close()
            # w2/x idle: the next new name evicts it (the longest idle), then it is reopened
            # as a new source (a new epoch: its subscribers re-read).
            c = await connect(server.url_for("w3"), additional_headers=headers, proxy=None)
            assert json.loads(await c.recv())["epoch"] == 3 and sources.closed == ["w2/x"]
            await c.close()
            deadline = time.monotonic() + 10
            while "w3" in server.channels:  # closed after idle_s without a subscriber
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert server.channels == ["w1"] and sources.closed == ["w2/x", "w3"]
            for ws in (a, a2):
                await ws.close()

        asyncio.run(main())
    assert sorted(sources.closed) == ["w1", "w2/x", "w3"]


def test_one_principal_holds_at_most_its_share_of_the_connections() -> None:
    """No one credential can hold every channel: past `max_per_principal` open connections
    its next is refused (429, Retry-After) while another principal is admitted; one closed
    (or refused at its handshake) gives its place back."""
    sources = Sources()
    who = {"Bearer a": "alice", "Bearer b": "bob"}
    with LiveServer(
        sources=sources,
        authorize=lambda c: who.get(f"Bearer {c.token}"),
        allowed_origins=[None],
        heartbeat_s=0.05,
        max_channels=8,
        max_per_principal=2,
    ) as server:

        async def main() -> None:
            alice = {"Authorization": "Bearer a"}
            one = await connect(server.url_for("w1"), additional_headers=alice, proxy=None)
            two = await connect(server.url_for("w2"), additional_headers=alice, proxy=None)
            with pytest.raises(InvalidStatus) as info:
                await connect(server.url_for("w3"), additional_headers=alice, proxy=None)
            assert info.value.response.status_code == 429
            assert info.value.response.headers["Retry-After"] == "5"
            assert "w3" not in sources.opened  # refused before its source was opened
            bob = await connect(
                server.url_for("w3"), additional_headers={"Authorization": "Bearer b"}, proxy=None
            )
            await one.close()
            deadline = time.monotonic() + 10
            while True:  # its place is given back once the connection has ended
                try:
                    three = await connect(
                        server.url_for("w4"), additional_headers=alice, proxy=None
                    )
                    break
                except InvalidStatus:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            for ws in (two, bob, three):
                await ws.close()

        asyncio.run(main())


def test_a_console_session_cookie_opens_the_stream_and_a_forged_one_does_not(
    tmp_path: Path,
) -> None:
    """With the operator console on, a logged-in operator's session cookie is a credential of
    the live endpoint (from an allowed Origin); a cookie naming no session is 401."""
    import httpx

    config = live_config(
        tmp_path, "/dev/null-unused", live="127.0.0.1:0", serve='console = "127.0.0.1:0"\n'
    )
    with daemon(config, tmp_path / "daemon.stderr") as (_, ready):
        url = f"{ready['live']}/{WORLD}"
        with httpx.Client(base_url=ready["console"], timeout=30) as http:
            answer = http.post("/api/login", json={"credential": OPERATOR})
            assert answer.status_code == 200, answer.text
            sid = http.cookies.get("tether_session")
        assert sid

        async def opened(cookie: str, origin: str = ORIGIN) -> dict[str, Any]:
            headers = {"Cookie": f"tether_session={cookie}"}
            async with connect(
                url,
                proxy=None,
                additional_headers=headers,
                origin=origin,  # type: ignore[arg-type]
            ) as ws:
                return dict(json.loads(await asyncio.wait_for(ws.recv(), 10)))

        assert set(asyncio.run(opened(sid))) == {"epoch", "seq", "deliveries"}
        # From the console's own page (its port chosen at start, so in no live_origins): a
        # browser there sends its Origin, which was refused 403, so no page could use it.
        page = ready["console"].rstrip("/")
        for origin in (page, page.replace("127.0.0.1", "localhost")):
            assert set(asyncio.run(opened(sid, origin))) == {"epoch", "seq", "deliveries"}
        assert _refused(url, additional_headers={"Cookie": f"tether_session={sid}"},
                        origin="http://127.0.0.1:1") == 403  # fmt: skip
        forged = "x" * len(sid)
        assert (
            _refused(url, additional_headers={"Cookie": f"tether_session={forged}"}, origin=ORIGIN)
            == 401
        )
    assert OPERATOR not in (tmp_path / "daemon.stderr").read_text()


def test_a_handshake_given_up_during_its_credential_check_gives_its_place_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handshake that timed out while its credential was being checked (a reconnect storm
    queues the argon2 checks) kept its principal's place for good: the thread admitted it
    after the handshake was given up, and nothing gave the place back, so the principal was
    refused (429) for the daemon's lifetime."""
    import threading

    from tether.live import ws

    monkeypatch.setattr(ws, "OPEN_TIMEOUT_S", 0.3)
    gate = threading.Event()

    def slow(creds: LiveCredentials) -> str | None:
        gate.wait(10)  # the check outlasts the handshake's timeout
        return "p" if creds.token == "t" else None

    with LiveServer(
        sources=Sources(),
        authorize=slow,
        allowed_origins=[None],
        heartbeat_s=0.05,
        max_per_principal=2,
    ) as server:
        port = int(server.url_for("w1").rsplit(":", 1)[1].split("/", 1)[0])
        request = (
            f"GET /live/w1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer t\r\n\r\n"
        ).encode()
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(request)
                sock.settimeout(5)
                assert sock.recv(100) == b""  # given up: closed, nothing answered
        gate.set()
        time.sleep(0.5)  # the checks finish after their handshakes were given up

        async def main() -> None:
            ws_conn = await connect(
                server.url_for("w1"), additional_headers={"Authorization": "Bearer t"}, proxy=None
            )
            await ws_conn.close()

        asyncio.run(main())


def test_a_client_that_sends_messages_is_not_closed_by_the_keepalive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream takes no messages, but a GUI's WebSocket wrapper sends some (app-level
    pings, acks): five left unread filled the connection's queue, which stopped its reading,
    pongs included, and the keepalive closed it with 1011 after its timeout."""
    from tether.live import ws

    monkeypatch.setattr(ws, "KEEPALIVE_S", 0.3)
    sources = Sources()
    with LiveServer(
        sources=sources,
        authorize=lambda c: "p" if c.token == "t" else None,
        allowed_origins=[None],
        heartbeat_s=0.1,
    ) as server:

        async def main() -> None:
            conn = await connect(
                server.url_for("w1"),
                additional_headers={"Authorization": "Bearer t"},
                proxy=None,
                ping_interval=None,
            )
            for _ in range(10):
                await conn.send('{"type":"ack"}')
            await asyncio.sleep(1.5)  # past several keepalive rounds
            frames = 0
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # still open: the heartbeats keep coming
                await asyncio.wait_for(conn.recv(), 2.0)
                frames += 1
            assert frames > 3
            await conn.close()

        asyncio.run(main())
