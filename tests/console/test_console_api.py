"""The console's HTTP API on a real `tether serve` over the DYNAMIXEL emulator: cookie flags,
CSP, CSRF and origin refusals, stable error codes that change nothing, aged and stale evidence
refused, one resolve path shared with `tether operator`, and the stop rules (no session from
loopback, never rate-limited)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _console_setup import Host, as_json, console_host, login, tether
from _dxl_setup import CREDENTIAL

MAX_AGE_S = 4.0


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    with console_host(tmp_path_factory.mktemp("console-api"), max_age_s=MAX_AGE_S) as h:
        yield h


@pytest.fixture(scope="module")
def parked(host: Host) -> str:
    return host.park("api-move")


def test_every_answer_carries_the_csp_and_the_cookie_is_httponly_strict_and_expires(
    host: Host,
) -> None:
    with host.http() as http:
        page = http.get("/")
        assert page.status_code == 200 and "STOP all robots" in page.text
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp
        assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        for path in ("/console.js", "/api/session", "/api/nothing-here"):
            assert "frame-ancestors 'none'" in http.get(path).headers["content-security-policy"]
        assert http.get("/api/session").json()["logged_in"] is False
        answer = http.post("/api/login", json={"credential": CREDENTIAL})
        assert answer.status_code == 200 and answer.json()["operator"] == "alice"
        flags = [f.strip() for f in answer.headers["set-cookie"].split(";")]
        assert flags[0].startswith("tether_session=") and len(flags[0]) > 40
        assert {"HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=1800"} <= set(flags)
        assert "Secure" not in flags  # plain HTTP on loopback; with TLS it is set (below)
        assert CREDENTIAL not in answer.text
        session = http.get("/api/session").json()
        # The cookie alone never fetches the CSRF token: a cookie goes to every port of the
        # host, and another local user's server there could hold it and act as the operator.
        assert session["logged_in"] and "csrf" not in session, session
        out = http.post("/api/logout", json={}, headers={"X-CSRF-Token": answer.json()["csrf"]})
        assert out.status_code == 200 and "Max-Age=0" in out.headers["set-cookie"]
        assert http.get("/api/session").json()["logged_in"] is False


def test_a_wrong_credential_is_refused_and_a_planner_is_not_an_operator(host: Host) -> None:
    with host.http() as http:
        wrong = http.post("/api/login", json={"credential": "not it"})
        assert (wrong.status_code, wrong.json()["code"]) == (401, "credential_refused")
        assert "tether_session" not in wrong.headers.get("set-cookie", "")
        assert http.post("/api/login", json={}).json()["code"] == "bad_request"
        named = http.post("/api/login", json={"credential": CREDENTIAL, "operator": "bob"})
        assert named.json()["code"] == "credential_refused"


def test_a_planners_token_at_the_login_is_any_wrong_credential(tmp_path: Path) -> None:
    """A valid secret of another role gets the answer a wrong one gets: the login never
    confirms that a token is valid, nor names whose it is."""
    from tether.devices.credentials import hash_secret

    token = "planner-token-console-7c1d"
    planner = f'\n[planners.ci]\ntoken = "{hash_secret(token)}"\nrole = "planner"\n'
    with console_host(tmp_path, extra=planner) as other, other.http() as http:
        wrong = http.post("/api/login", json={"credential": "not it"})
        valid = http.post("/api/login", json={"credential": token})
        assert (valid.status_code, valid.json()) == (wrong.status_code, wrong.json()), valid.text
        assert "ci" not in valid.json()["message"] and "planner" not in valid.text


def test_a_loopback_live_stream_says_when_its_session_ended_and_goes_on(host: Host) -> None:
    """On loopback the live stream needs no session: one opened with a session that then ends
    (a logout in another tab) says so once (`session`, `loopback: true`) and keeps streaming,
    so the page can show the login again."""
    with host.http() as http:
        csrf = login(http)
        with http.stream("GET", "/api/live") as live:
            lines = live.iter_lines()
            assert any(line == "event: activities" for line in lines)
            with host.http() as other:
                other.cookies.update(http.cookies)
                out = other.post("/api/logout", json={}, headers={"X-CSRF-Token": csrf})
                assert out.status_code == 200
            said = None
            deadline = time.monotonic() + 20  # devices frames come every second meanwhile
            for line in lines:
                assert time.monotonic() < deadline, "no session event within 20 s"
                if said == "session":
                    assert json.loads(line.removeprefix("data: ")) == {
                        "logged_in": False,
                        "loopback": True,
                    }
                    break
                if line.startswith("event: "):
                    said = line.removeprefix("event: ")
            else:
                pytest.fail("the stream ended without saying the session ended")
            # It goes on: the next frames (or, with nothing changed, its keepalive) still come.
            assert any(line.startswith(("event: ", ": keepalive")) for line in lines)


def test_the_live_stream_sends_the_devices_again_only_when_they_change(host: Host) -> None:
    """At rest the devices event is sent once, not every second for a read time that moved:
    the page rebuilds the device cards on each one (their Stop buttons too, and the keyboard
    focus on one). A change (a stop latches the arm) is sent."""
    with host.http() as http, http.stream("GET", "/api/live") as live:
        lines = live.iter_lines()
        devices = 0
        deadline = time.monotonic() + 15
        for line in lines:  # until the keepalive: nothing else was sent for 10 s
            if line == "event: devices":
                devices += 1
            if line.startswith(": keepalive") or time.monotonic() > deadline:
                break
        assert devices == 1, devices
        stop = http.post("/api/stop", json={"robot": "arm"}, headers={"X-Tether-Stop": "1"})
        assert stop.status_code == 200, stop.text
        said = None
        for line in lines:
            if said == "devices":
                assert json.loads(line.removeprefix("data: "))["devices"][0]["latched"] is True
                break
            said = line.removeprefix("event: ") if line.startswith("event: ") else said
    _resume(host.config)  # the host is the module's: its next test moves the arm


def test_state_changing_requests_need_the_session_csrf_json_and_this_origin(
    host: Host, parked: str
) -> None:
    before = host.effectful()
    body = {"key": parked, "decision": "abandon", "revision": 1}
    with host.http() as http:
        assert http.post("/api/resolve", json=body).json()["code"] == "session_required"
        csrf = login(http)
        refusals = {
            "no token": http.post("/api/resolve", json=body),
            "wrong token": http.post("/api/resolve", json=body, headers={"X-CSRF-Token": "x" * 43}),
            "other origin": http.post(
                "/api/resolve",
                json=body,
                headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
            ),
            "a form": http.post(
                "/api/resolve",
                content=b"key=x&decision=abandon&revision=1",
                headers={
                    "X-CSRF-Token": csrf,
                    "Content-Type": "application/x-www-form-urlencoded",
                },
            ),
            "rebinding": http.post(
                "/api/resolve", json=body, headers={"X-CSRF-Token": csrf, "Host": "evil.example"}
            ),
            "secret in url": http.post(
                "/api/resolve?token=abc", json=body, headers={"X-CSRF-Token": csrf}
            ),
        }
        codes = {k: (r.status_code, r.json()["code"]) for k, r in refusals.items()}
        assert codes == {
            "no token": (403, "csrf_refused"),
            "wrong token": (403, "csrf_refused"),
            "other origin": (403, "origin_refused"),
            "a form": (415, "not_json"),
            "rebinding": (403, "host_not_loopback"),
            "secret in url": (400, "secret_in_url"),
        }
        for answer in refusals.values():
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    view = host.view(parked)
    assert (view["state"], view["revision"]) == ("awaiting_decision", 1)  # nothing changed
    assert host.effectful() == before


def test_bad_requests_get_a_stable_code_and_change_nothing(host: Host, parked: str) -> None:
    before = host.effectful()
    with host.http() as http:
        headers = {"X-CSRF-Token": login(http)}

        def post(path: str, body: object) -> tuple[int, str]:
            answer = http.post(path, json=body, headers=headers)
            return answer.status_code, answer.json()["code"]

        revision = host.view(parked)["revision"]
        assert post("/api/resolve", {"decision": "abandon", "revision": revision}) == (
            400,
            "bad_request",
        )
        assert post("/api/resolve", {"key": parked, "decision": "abandon", "revision": "1"}) == (
            400,
            "bad_request",
        )
        assert post("/api/resolve", {"key": parked, "decision": "maybe", "revision": 1}) == (
            400,
            "bad_request",
        )
        assert post("/api/resolve", [1, 2]) == (400, "bad_request")
        assert post(
            "/api/resolve", {"key": "local/no.such/kind", "decision": "abandon", "revision": 1}
        ) == (404, "unknown_activity")
        assert post("/api/device", {"robot": "arm", "action": "explode"}) == (400, "bad_request")
        assert post("/api/device", {"robot": "ghost", "action": "reread"}) == (
            404,
            "unknown_robot",
        )
        assert post("/api/device", {"robot": "arm", "action": "reboot"}) == (
            409,
            "reboot_unconfirmed",
        )
        assert post("/api/device", {"robot": "arm", "action": "reboot", "arm_supported": True,
                                    "joints": ["elbow"]}) == (400, "unknown_joint")  # fmt: skip
        assert post("/api/nowhere", {}) == (404, "not_found")
        big = http.post(
            "/api/resolve",
            content=b"{" + b" " * (70 * 1024) + b"}",
            headers={**headers, "Content-Type": "application/json"},
        )
        assert (big.status_code, big.json()["code"]) == (413, "body_too_large")
        # Within the size bound, nested past the parser's depth: a 500 and a traceback were.
        for path in ("/api/login", "/api/resolve"):
            deep = http.post(
                path,
                content=b'{"credential":' + b"[" * 30000 + b"]" * 30000 + b"}",
                headers={**headers, "Content-Type": "application/json"},
            )
            assert (deep.status_code, deep.json()["code"]) == (400, "bad_request"), deep.text
        assert http.put("/api/resolve", json={}).json()["code"] == "method_not_allowed"
        assert http.get("/api/decision").json()["code"] == "bad_request"
        malformed = http.get("/api/decision", params={"id": "\x00\xff"})
        assert (malformed.status_code, malformed.json()["code"]) == (400, "bad_operation_id")
        # A negative Content-Length is a bad one (it was read as an empty body).
        base = http.base_url
        with socket.create_connection((base.host, base.port), timeout=30) as sock:
            sock.sendall(
                b"POST /api/login HTTP/1.1\r\nHost: " + f"{base.host}:{base.port}".encode()
                + b"\r\nContent-Type: application/json\r\nContent-Length: -5\r\n"
                b"Connection: close\r\n\r\n"
            )  # fmt: skip
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] == b"400", head
        assert json.loads(body) == {"code": "bad_request", "message": "a bad Content-Length"}
        # A served path asked with the other method is 405 naming the one it is served to,
        # not 404; a method no handler serves is JSON too, never the server's HTML page.
        wrong = {
            "GET /api/login": http.get("/api/login"),
            "GET /api/resolve": http.get("/api/resolve"),
            "POST /api/status": http.post("/api/status", json={}, headers=headers),
            "POST /": http.post("/", json={}, headers=headers),
            "PATCH /api/resolve": http.patch("/api/resolve", json={}),
        }
        got = {
            k: (r.status_code, r.json()["code"], r.headers.get("allow")) for k, r in wrong.items()
        }
        assert got == {
            "GET /api/login": (405, "method_not_allowed", "POST"),
            "GET /api/resolve": (405, "method_not_allowed", "POST"),
            "POST /api/status": (405, "method_not_allowed", "GET"),
            "POST /": (405, "method_not_allowed", "GET"),
            "PATCH /api/resolve": (405, "method_not_allowed", "GET, POST"),
        }
        assert all(r.headers["content-type"] == "application/json" for r in wrong.values())
    view = host.view(parked)
    assert view["state"] == "awaiting_decision" and view["revision"] == revision
    assert host.effectful() == before  # no reboot, nothing sent


def test_aged_evidence_is_refused_then_a_reread_gives_a_fresh_revision_and_a_stale_one_is_refused(
    host: Host, parked: str
) -> None:
    with host.http() as http:
        headers = {"X-CSRF-Token": login(http)}
        shown = http.get("/api/decision", params={"id": parked}).json()
        revision = shown["revision"]
        age = shown["read_back_age_ms"]
        time.sleep(max(0.0, MAX_AGE_S + 0.5 - age / 1000))
        old = http.post(
            "/api/resolve",
            json={"key": parked, "decision": "abandon", "revision": revision},
            headers=headers,
        )
        assert (old.status_code, old.json()["code"]) == (409, "evidence_too_old")
        assert old.json()["current"]["revision"] == revision
        assert host.view(parked)["state"] == "awaiting_decision"
        reread = http.post(
            "/api/device", json={"robot": "arm", "action": "reread"}, headers=headers
        )
        assert reread.status_code == 200, reread.text
        (refreshed,) = reread.json()["refreshed"]
        assert refreshed["key"] == parked and refreshed["revision"] == revision + 1
        assert "re-read by alice" in refreshed["changes"][0]
        stale = http.post(
            "/api/resolve",
            json={"key": parked, "decision": "abandon", "revision": revision},
            headers=headers,
        )
        doc = stale.json()
        assert (stale.status_code, doc["code"]) == (409, "stale_revision")
        assert doc["current"]["revision"] == revision + 1
        assert doc["current"]["since_previous"]["revision"] == revision
        assert host.view(parked)["state"] == "awaiting_decision"


def test_the_console_resolves_through_the_same_catalog_path_as_tether_operator(
    host: Host, parked: str
) -> None:
    with host.http() as http:
        headers = {"X-CSRF-Token": login(http)}
        fresh = http.post("/api/device", json={"robot": "arm", "action": "reread"}, headers=headers)
        revision = fresh.json()["refreshed"][0]["revision"]
        listed = as_json(tether("operator", "--config", str(host.config), "--json", "list"))
        assert [(p["key"], p["revision"]) for p in listed] == [(parked, revision)]
        done = http.post(
            "/api/resolve",
            json={"key": parked, "decision": "abandon", "revision": revision, "note": "web"},
            headers=headers,
        )
        assert done.status_code == 200, done.text
        assert (done.json()["operator"], done.json()["status"]) == ("alice", "resolved")
        again = tether(
            "operator", "--config", str(host.config), "--json", "resolve", parked,
            "--decision", "abandon", "--revision", str(revision), "--credential-stdin",
            stdin=f"{CREDENTIAL}\n",
        )  # fmt: skip
        assert again.returncode == 1 and as_json(again)["code"] == "not_parked"
        assert as_json(tether("operator", "--config", str(host.config), "--json", "list")) == []
        assert http.get("/api/decisions").json()["decisions"] == []
    final = host.wait(parked, ("failed",))
    assert final["state"] == "failed"


def test_stop_needs_no_session_from_loopback_its_header_always_and_is_never_rate_limited(
    host: Host,
) -> None:
    done = host.wait(host.submit("warm", {"a": 0.2, "b": -0.2}), ("done",))
    assert done["state"] == "done"  # torque on: a hold is `held`
    with host.http() as http:
        no_header = http.post("/api/stop", json={})
        assert (no_header.status_code, no_header.json()["code"]) == (403, "stop_header_required")
        cross = http.post(
            "/api/stop", json={}, headers={"X-Tether-Stop": "1", "Origin": "http://evil.example"}
        )
        assert cross.json()["code"] == "origin_refused"
        # Exhaust the login rate limit of this peer: logins are refused, Stop is not.
        for _ in range(6):
            http.post("/api/login", json={"credential": "guess"})
        limited = http.post("/api/login", json={"credential": CREDENTIAL})
        assert (limited.status_code, limited.json()["code"]) == (429, "credential_rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        for _ in range(3):
            stop = http.post("/api/stop", json={"robot": "arm"}, headers={"X-Tether-Stop": "1"})
            assert stop.status_code == 200, stop.text
            (report,) = stop.json()["stopped"]
            assert report["robot"] == "arm" and report["ok"] is True, report["joints"]
            assert [j["state"] for j in report["joints"]] == ["held", "held"]
            assert (
                stop.json()["latched"] is True and "not an emergency stop" in stop.json()["notice"]
            )
        status = http.get("/api/status").json()
        assert status["devices"][0]["latched"] is True
    # The CLI's own bucket (local) was never touched: the operator can still resume. The
    # latch names the console (no session, no token: a loopback console asks for neither).
    assert _resume(host.config)["stopped_by"] == "console Stop"


def _resume(config: Path) -> dict[str, Any]:
    """`tether operator resume arm` as the operator: its JSON answer."""
    resumed = tether(
        "operator", "--config", str(config), "--json", "resume", "arm", "--credential-stdin",
        stdin=f"{CREDENTIAL}\n",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return as_json(resumed)  # type: ignore[no-any-return]


def test_off_loopback_the_console_needs_tls_a_session_for_reads_and_a_stop_token(
    tmp_path: Path,
) -> None:
    import ssl

    import httpx
    from tether.devices.credentials import hash_secret

    from tests._listeners import make_cert, require_non_loopback_address
    from tests._secrets import PLANNER

    address = require_non_loopback_address()
    cert = make_cert(tmp_path / "tls", ips=(address,))
    stop_token = "stop-token-for-the-console-tests"
    extra = (
        f'\n[serve]\nlease_ms = 1500\nsse = "off"\nconsole = "{address}:0"\n'
        f'console_stop_token = "{hash_secret(stop_token)}"\n'
        f'\n[tls]\ncert = "{cert.cert}"\nkey = "{cert.key}"\n'
        f'\n[planners.ci]\ntoken = "{hash_secret(PLANNER)}"\nrole = "planner"\n'
    )
    from _dxl_setup import emulator_process
    from test_serve_daemon import daemon, serve_config

    with emulator_process(tmp_path) as emu:
        config = serve_config(tmp_path, emu.path, extra=extra)
        with daemon(config) as (_, ready):
            url = str(ready["console"])
            assert url.startswith(f"https://{address}:")
            trust = ssl.create_default_context(cafile=str(cert.cert))
            with httpx.Client(base_url=url, verify=trust, timeout=30) as http:
                for path in ("/api/decisions", "/api/status", "/api/live", "/api/activities"):
                    answer = http.get(path)
                    assert (answer.status_code, answer.json()["code"]) == (401, "session_required")
                stop = {"X-Tether-Stop": "1"}
                assert http.post("/api/stop", json={}, headers=stop).json()["code"] == (
                    "session_required"
                )
                wrong = http.post(
                    "/api/stop", json={}, headers={**stop, "Authorization": "Bearer wrong"}
                )
                assert (wrong.status_code, wrong.json()["code"]) == (401, "stop_refused")
                holders = {
                    stop_token: "console Stop by console_stop_token",
                    PLANNER: "console Stop by planner ci",
                    CREDENTIAL: "console Stop by operator alice",  # the operator may stop too
                }
                for token, by in holders.items():
                    ok = http.post(
                        "/api/stop", json={}, headers={**stop, "Authorization": f"Bearer {token}"}
                    )
                    assert ok.status_code == 200, ok.text
                    assert ok.json()["stopped"][0]["robot"] == "arm"
                    if token != CREDENTIAL:  # the latch names who stopped (resume answers it)
                        assert _resume(config)["stopped_by"] == by
                answer = http.post("/api/login", json={"credential": CREDENTIAL})
                assert "Secure" in [f.strip() for f in answer.headers["set-cookie"].split(";")]
                csrf = answer.json()["csrf"]
                assert http.get("/api/decisions").status_code == 200
                assert http.get("/api/status").json()["devices"][0]["latched"] is True
                assert _resume(config)["stopped_by"] == "console Stop by operator alice"
                by_session = http.post("/api/stop", json={}, headers={**stop, "X-CSRF-Token": csrf})
                assert by_session.status_code == 200
                assert _resume(config)["stopped_by"] == "console Stop by operator alice"
    # The same address without [tls] is refused before a socket opens (exit 2).
    (tmp_path / "plain").mkdir()
    plain = serve_config(tmp_path / "plain", "/dev/null-unused", extra=extra.split("\n[tls]")[0])
    refused = tether("serve", "--config", str(plain))
    assert refused.returncode == 2 and "insecure_listener" in refused.stderr
    # Before anything else: no lock taken, no control socket served or logged first.
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "control socket" not in refused.stderr


def test_live_feeds_never_take_the_connections_a_stop_needs(host: Host) -> None:
    """256 open live feeds (no credential needed on loopback: any local process) held every
    connection of the console, and the page's stop was refused `listener_busy`. Feeds take at
    most all but 32 of them: past that a feed is refused, and the stop is served."""
    from tether._listen import MAX_CONNECTIONS, STREAM_RESERVE

    port = int(host.url.rsplit(":", 1)[1].rstrip("/"))
    request = f"GET /api/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    feeds: list[socket.socket] = []
    answers: list[bytes] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(request)
            feeds.append(sock)
        for sock in feeds:
            answers.append(sock.recv(64))
        refused = [a for a in answers if a.startswith(b"HTTP/1.0 503") or b" 503 " in a[:20]]
        assert len(refused) == STREAM_RESERVE, [a[:20] for a in answers[-3:]]
        with host.http() as http:
            stop = http.post("/api/stop", json={"robot": "arm"}, headers={"X-Tether-Stop": "1"})
        assert stop.status_code == 200, stop.text
    finally:
        for sock in feeds:
            sock.close()
    _resume(host.config)  # the host is the module's: its next test moves the arm
