"""`tether serve` as a subprocess over an emulated DYNAMIXEL arm (a separate process on a real
pty): it owns the port, runs the moves `tether move` and `tether.client` submit, answers
`tether stop`, `tether status` and `tether operator`, and is single-instance. The emulator's
journal is the independent record of every frame."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _dxl_setup import (
    CREDENTIAL,
    GOALS,
    TARGETS,
    EmulatorProcess,
    emulator_process,
    outcome,
    run_worker,
    target_actions,
)
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import hash_credential
from tether.client import Client

from tests._serve import SERVE, daemon, effectful, serve_config, tether, watch_until


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[EmulatorProcess]:
    with emulator_process(tmp_path) as emulator:
        yield emulator


def _moving(client: Client, activity: str, targets: dict[str, float]) -> dict[str, object]:
    """A move submitted to the daemon, once its ACTION is sent (its progress says moving)."""
    kind = "physical_ai.robot_move.absolute"
    view = client.submit("local", activity, kind, {"robot": "arm", "targets": targets})
    watch_until(client, view["key"], ("moving",), 60)
    return view


def test_a_move_through_the_daemon_settles_with_one_action_and_the_port_is_owned(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    with daemon(config) as (proc, ready):
        assert ready["ready"] is True and ready["sse"].startswith("http://127.0.0.1:")
        done = run_worker(config)
        result = outcome(done)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (result["status"], result["conclusion"], result["via"]) == (
            "done",
            "executed",
            "daemon",
        )
        assert any(json.loads(line).get("progress") for line in done.stdout.splitlines())
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
        # `--lease-ms` (given by run_worker) is the daemon's [serve] lease_ms: said, not taken.
        assert "--lease-ms ignored" in done.stderr, done.stderr
        # The same move again is the same Activity: nothing more is sent.
        again = run_worker(config)
        assert again.returncode == 0 and outcome(again)["status"] == "done"
        # Shown as it ended, never its old progress again (the arm may have moved since).
        assert outcome(again)["earlier"] is True
        assert not any(json.loads(line).get("progress") for line in again.stdout.splitlines())
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
        # Retention compacts it while the daemon runs (`tether db prune`, another process,
        # closing its catalog connection last but for the daemon's): the daemon's stores
        # keep working, and the move still reads as it ended, never "pending: run it again".
        for asked in (("status",), ("operator", "list")):  # the daemon opens what they ask
            answered = tether(*asked[:1], "--config", str(config), "--json", *asked[1:])
            assert answered.returncode == 0, answered.stdout + answered.stderr
        deadline = time.monotonic() + 30
        while True:  # once settled (observed by a later tick)
            pruned = tether(
                "db", "prune", "--data-dir", str(tmp_path / "state" / "moves"), "--older-than",
                "1ms", "--json",
            )  # fmt: skip
            assert pruned.returncode == 0, pruned.stdout + pruned.stderr
            if json.loads(pruned.stdout)["compacted"] == 1:
                break
            assert time.monotonic() < deadline, pruned.stdout
            time.sleep(0.2)
        compacted = run_worker(config)
        assert compacted.returncode == 0, compacted.stdout + compacted.stderr
        shown = outcome(compacted)
        assert (shown["status"], shown["earlier"], shown["compacted"]) == ("done", True, True)
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
        fresh = run_worker(config, activity="after-prune")
        assert fresh.returncode == 0, fresh.stdout + fresh.stderr
        assert outcome(fresh)["status"] == "done"
        # Another owner of the port is refused: the daemon owns it.
        other = tether("host", "serve", "--config", str(config))
        assert other.returncode == 7 and "port_owned" in other.stderr
        assert str(proc.pid) in other.stderr
        assert proc.poll() is None


CLIENT_SCRIPT = """
import json, sys
from tether.client import AdmissionConflict, Client

client = Client(config=sys.argv[1])
kind = "physical_ai.robot_move.absolute"
request = {"robot": "arm", "targets": {"a": 0.5, "b": -0.3}}
first = client.submit("local", "job-1", kind, request)
second = client.submit("local", "job-1", kind, request)
try:
    client.submit("local", "job-1", kind, {"robot": "arm", "targets": {"a": 0.2, "b": -0.3}})
    conflict = None
except AdmissionConflict as exc:
    conflict = exc.code
    held_text = exc.message
views = list(client.watch(first["key"], timeout=60))
status = client.status()
stopped = client.stop()
print(json.dumps({"first": first, "second": second, "conflict": conflict, "held": held_text,
                  "last": views[-1],
                  "states": [v["state"] for v in views], "status": status, "stop": stopped}))
"""


def test_submit_from_another_process_is_idempotent_and_a_conflict_is_refused(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    script = tmp_path / "planner.py"
    script.write_text(CLIENT_SCRIPT)
    with daemon(config):
        done = subprocess.run(
            [sys.executable, str(script), str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
    assert doc["first"]["created"] is True and doc["second"]["created"] is False
    assert (
        doc["first"]["key"] == doc["second"]["key"] == "local/physical_ai.robot_move.absolute/job-1"
    )
    assert doc["conflict"] == "admission_conflict"
    # The request already held, as JSON (not a Python repr).
    held = json.loads(doc["held"].split("is another request: ", 1)[1])
    assert held["targets"] == {"a": 0.5, "b": -0.3}, doc["held"]
    last = doc["last"]
    assert (last["state"], last["settled"], last["final"]) == ("done", True, True)
    assert last["result"]["outcome"] == "completed"
    assert doc["status"]["activities"]["settled"] == 1
    (stopped,) = doc["stop"]
    assert (stopped["robot"], stopped["ok"]) == ("arm", True)
    assert [j["state"] for j in stopped["joints"]] == ["held", "held"]
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_get_or_watch_of_a_key_nothing_was_submitted_under_is_unknown_activity(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """`get` of a key nothing was submitted under answered `state: unknown`, and `watch` of it
    was never final: a typo in a key watched until its timeout, for ever by default."""
    from tether.client import Client, ClientError

    config = serve_config(tmp_path, emu.path)
    with daemon(config):
        client = Client(config=config)
        for ask in (
            lambda: client.get("local/physical_ai.robot_move.absolute/no-such-move"),
            lambda: list(client.watch("local/physical_ai.robot_move.absolute/no-such", 30)),
            lambda: client.get("nowhere/physical_ai.robot_move.absolute/x"),
        ):
            started = time.monotonic()
            with pytest.raises(ClientError) as info:
                ask()
            assert info.value.code == "unknown_activity", info.value
            assert time.monotonic() - started < 10
        submitted = client.submit(
            "local", "real", "physical_ai.robot_move.absolute", {"robot": "arm", "targets": TARGETS}
        )
        final = list(client.watch(submitted["key"], 60))[-1]  # submitted: watched to its end
    assert final["final"] is True and final["state"] == "done", final


def test_status_shows_devices_activities_and_says_when_no_daemon_runs(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    none = tether("status", "--config", str(config))
    assert none.returncode == 7 and "daemon_not_running" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1
    with daemon(config) as (proc, _):
        text = tether("status", "--config", str(config))
        assert text.returncode == 0, text.stderr
        assert f"arm: owned by pid {proc.pid}" in text.stdout
        assert "a: at +0.0000 rad" in text.stdout or " rad, goal " in text.stdout
        assert "hardware errors none" in text.stdout and "tick" not in text.stdout
        as_json = tether("status", "--config", str(config), "--json")
        doc = json.loads(as_json.stdout)
    (device,) = doc["devices"]
    assert device["owner_pid"] == proc.pid and device["available"] is True
    assert [s["id"] for s in device["identity"]["servos"]] == [1, 2]
    assert set(device["read_back"]["joints"]) == {"a", "b"}
    assert device["read_back"]["joints"]["a"]["torque_on"] in (True, False)
    assert set(doc["activities"]) >= {"pending", "running", "awaiting_decision", "done"}
    assert doc["parked"] == [] and doc["daemon"]["pid"] == proc.pid


def test_a_second_daemon_is_refused_by_state_dir_data_dir_and_sse_port(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    with daemon(config) as (proc, ready):
        second = tether("serve", "--config", str(config), timeout=60)
        assert second.returncode == 7
        assert "daemon_running" in second.stderr and f"pid {proc.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        # Another state dir on the same data dir.
        other = tmp_path / "other"
        other.mkdir()
        data_dir = tmp_path / "state" / "moves"
        same_data = serve_config(
            other,
            "/dev/null-unused",
            extra=SERVE.replace("[serve]", f'[serve]\ndata_dir = "{data_dir}"'),
        )
        refused = tether("serve", "--config", str(same_data), timeout=60)
        assert refused.returncode == 7 and "data dir" in refused.stderr
        assert f"pid {proc.pid}" in refused.stderr
        # Another state dir and data dir, the same stream port.
        third = tmp_path / "third"
        third.mkdir()
        port = ready["sse"].split(":")[2].split("/")[0]
        same_port = serve_config(
            third, "/dev/null-unused", extra=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        busy = tether("serve", "--config", str(same_port), timeout=60)
        assert busy.returncode == 7 and "sse_unavailable" in busy.stderr
        assert proc.poll() is None


def test_bad_serve_settings_are_one_line_usage_errors(tmp_path: Path) -> None:
    config = serve_config(tmp_path, "/dev/null-unused", extra="\n[serve]\nworker = 2\n")
    done = tether("serve", "--config", str(config), timeout=60)
    assert done.returncode == 2
    assert "unknown_key" in done.stderr and "did you mean `workers`?" in done.stderr
    assert "Traceback" not in done.stderr
    config.write_text(config.read_text().replace("worker = 2", 'sse = "0.0.0.0:8765"'))
    open_sse = tether("serve", "--config", str(config), timeout=60)
    # Off loopback with no [tls] table: the listener policy refuses it before a socket opens.
    assert open_sse.returncode == 2 and "insecure_listener" in open_sse.stderr
    assert "Traceback" not in open_sse.stderr


def test_a_daemon_that_cannot_start_sends_no_frame_to_its_robots(tmp_path: Path) -> None:
    """Every refusal of `[serve]` (a listener off loopback without TLS, a families factory
    that fails, a taken gRPC port) and of its stores comes before a robot's port is opened:
    the servos see not one frame (no connect, no safe-stop at the close)."""
    with emulator_process(tmp_path) as emu:
        before = len(emu.journal())
        for name, extra in (
            ("console", SERVE + 'console = "0.0.0.0:0"\n'),
            ("live", SERVE + 'live = "0.0.0.0:0"\n'),
            ("families", SERVE + 'families = ["json:loads"]\n'),
        ):
            (tmp_path / name).mkdir()
            config = serve_config(tmp_path / name, emu.path, extra=extra)
            done = tether("serve", "--config", str(config), timeout=60)
            assert done.returncode == 2, (name, done.stderr)
            assert "Traceback" not in done.stderr
            assert emu.journal()[before:] == [], name
        # A gRPC address another listener holds: exit 7, still before any robot's port opens.
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            (tmp_path / "grpc").mkdir()
            extra = SERVE + f'grpc = "127.0.0.1:{port}"\n'
            config = serve_config(tmp_path / "grpc", emu.path, extra=extra)
            done = tether("serve", "--config", str(config), timeout=60)
        assert done.returncode == 7 and "grpc_unavailable" in done.stderr, done.stderr
        assert emu.journal()[before:] == []


def test_a_stop_mid_move_is_answered_by_the_daemon_latches_and_the_operator_acts_through_it(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:  # real-time shafts: a long move
        config = serve_config(tmp_path, emu.path)
        with daemon(config):
            client = Client(config=config)
            kind = "physical_ai.robot_move.absolute"
            view = client.submit(
                "local", "long", kind, {"robot": "arm", "targets": {"a": 1.4, "b": -1.4}}
            )
            watch_until(client, view["key"], ("moving",), 60)  # progress: ACTION is sent
            stop = tether("stop", "--config", str(config), "--json")
            assert stop.returncode == 0, stop.stdout + stop.stderr
            reports = json.loads(stop.stdout)
            assert [r["via"] for r in reports] == ["owner"] and reports[0]["ok"] is True
            stopped_at = len(emu.journal())
            parked = watch_until(client, view["key"], ("awaiting_decision",), 60)
            assert parked["reason"] == "stopped_by_operator"
            time.sleep(0.5)
            assert effectful(emu.journal()[stopped_at:]) == []  # nothing moved after the stop
            # The operator's commands go through the daemon, which verifies the credential
            # against its own host.toml: a copy with the caller's own hash is refused.
            copy = tmp_path / "copy.toml"
            mine = hash_credential("mallory's own secret")
            text = config.read_text()
            start = text.index('credential = "') + len('credential = "')
            copy.write_text(text[:start] + mine + text[text.index('"', start) :])
            listed = tether("operator", "--config", str(copy), "--json", "list")
            assert listed.returncode == 0 and json.loads(listed.stdout)[0]["key"] == view["key"]
            forged = tether(
                "operator", "--config", str(copy), "--json", "resolve", view["key"],
                "--decision", "abandon", "--revision", str(parked["revision"]),
                "--credential-stdin", stdin="mallory's own secret\n",
            )  # fmt: skip
            assert forged.returncode == 1, forged.stdout + forged.stderr
            assert json.loads(forged.stdout)["code"] == "credential_refused"
            # No credential flag and no terminal to ask on: said so, nothing sent (it sent an
            # empty credential, and the daemon answered "a valid credential is required").
            unasked = tether("operator", "--config", str(copy), "--json", "resume", "arm")
            assert unasked.returncode == 1, unasked.stdout + unasked.stderr
            refusal = json.loads(unasked.stdout)
            assert refusal["code"] == "empty_credential", refusal
            assert "--credential-stdin" in refusal["message"], refusal
            assert client.get(view["key"])["state"] == "awaiting_decision"
            resumed = tether(
                "operator", "--config", str(copy), "--json", "resume", "arm",
                "--credential-stdin", stdin=f"{CREDENTIAL}\n",
            )  # fmt: skip
            assert resumed.returncode == 0, resumed.stdout + resumed.stderr
            assert json.loads(resumed.stdout)["resumed_by"] == "alice"
            decided = tether(
                "operator", "--config", str(copy), "--json", "resolve", view["key"],
                "--decision", "abandon", "--revision", str(parked["revision"]),
                "--credential-stdin", stdin=f"{CREDENTIAL}\n",
            )  # fmt: skip
            assert decided.returncode == 0, decided.stdout + decided.stderr
            assert json.loads(decided.stdout)["operator"] == "alice"
            final = list(client.watch(view["key"], timeout=60))[-1]
            assert (final["state"], final["settled"]) == ("failed", True)
            # Said as abandoned, and by whom: the view's result was `{}` (its reference names
            # the decision, not a document), and the demo's JSON outcome null.
            assert final["result"]["outcome"] == final["result"]["code"] == "abandoned", final
            assert final["result"]["error"].startswith("abandoned by operator alice"), final
            for done in (stop, listed, forged, resumed, decided):
                assert CREDENTIAL not in done.stdout + done.stderr


def test_sigkill_then_restart_reclaims_the_socket_and_reconciles_without_a_second_action(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=2.0) as emu:
        config = serve_config(tmp_path, emu.path)
        client = Client(config=config)
        with daemon(config) as (proc, _):
            view = _moving(client, "killed", {"a": 0.5, "b": -0.3})
            proc.kill()
            proc.wait()
        sock = Path(client.socket_path)
        assert sock.exists()  # left behind by the killed daemon
        assert tether("status", "--config", str(config)).returncode == 7
        with daemon(config) as (again, ready):
            assert ready["socket"] == str(sock) and again.pid != proc.pid
            final = list(client.watch(view["key"], timeout=90))[-1]
            assert (final["state"], final["settled"]) == ("done", True), final
            assert final["result"]["outcome"] in ("completed", "recovered")
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_sigterm_safe_stops_every_device_and_exits_0(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = serve_config(tmp_path, emu.path, policy="torque_off")
        client = Client(config=config)
        with daemon(config) as (proc, _):
            view = _moving(client, "cut", {"a": 1.4, "b": -1.4})
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
            assert proc.stderr is not None
            logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line]
        stops = [entry["report"] for entry in logs if entry["msg"] == "safe stop"]
        assert [s["robot"] for s in stops] == ["arm"] and stops[0]["ok"] is True
        for dxl_id in (1, 2):
            assert emu.request(op="snapshot", id=dxl_id)["torque_enable"] == 0
        assert client.running() is None and not os.path.exists(client.socket_path)
        with daemon(config):  # the move it cut is parked with that stop as its reason
            parked = watch_until(client, view["key"], ("awaiting_decision",), 90)
        assert parked["reason"] == "stopped_at_shutdown", parked


def test_a_stop_waits_on_no_storage_lock_even_mid_move(tmp_path: Path) -> None:
    """The stop path writes only the robot's latch file: with the catalog and the world ledger
    locked for writing by another process, a stop mid-move is still answered at once."""
    import sqlite3

    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = serve_config(tmp_path, emu.path)
        with daemon(config):
            client = Client(config=config)
            view = client.submit(
                "local", "locked", "physical_ai.robot_move.absolute",
                {"robot": "arm", "targets": {"a": 1.4, "b": -1.4}},
            )  # fmt: skip
            watch_until(client, view["key"], ("moving",), 60)
            data = tmp_path / "state" / "moves"
            locks = []
            for name in ("catalog.db", "world.db"):
                conn = sqlite3.connect(data / name, timeout=0.1, isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")  # holds the write lock until rollback
                locks.append(conn)
            try:
                start = time.monotonic()
                stop = tether("stop", "--config", str(config), "--json")
                elapsed = time.monotonic() - start
            finally:
                for conn in locks:
                    conn.rollback()
                    conn.close()
            assert stop.returncode == 0, stop.stdout + stop.stderr
            assert json.loads(stop.stdout)[0]["via"] == "owner"
            assert elapsed < 10.0  # a blocked stop would wait out the catalog's busy timeout
            stopped_at = len(emu.journal())
            parked = watch_until(client, view["key"], ("awaiting_decision",), 60)
            assert parked["reason"] == "stopped_by_operator"
            assert effectful(emu.journal()[stopped_at:]) == []


GHOST = """
[ports.ghost_bus]
url = "{url}"
timeout_ms = 100
[robots.ghost]
port = "ghost_bus"
[[robots.ghost.joints]]
name = "g"
id = 7
min = -1.0
max = 1.0
"""


def test_a_robot_that_cannot_be_connected_is_reported_and_the_others_are_served(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path, extra=GHOST.format(url=tmp_path / "no-tty") + SERVE)
    with daemon(config) as (proc, ready):
        assert set(ready["unavailable"]) == {"ghost"}
        doc = json.loads(tether("status", "--config", str(config), "--json").stdout)
        by_name = {d["robot"]: d for d in doc["devices"]}
        assert by_name["arm"]["available"] is True and by_name["arm"]["owner_pid"] == proc.pid
        assert by_name["ghost"]["available"] is False and by_name["ghost"]["owner_pid"] is None
        assert "no-tty" in by_name["ghost"]["error"]
        text = tether("status", "--config", str(config)).stdout
        assert "ghost: unavailable" in text
        done = run_worker(config)
        assert done.returncode == 0 and outcome(done)["status"] == "done"


def test_an_operator_reboot_goes_through_the_daemon_and_needs_its_credential(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    with daemon(config):
        refused = tether(
            "operator", "--config", str(config), "--json", "reboot", "arm", "--arm-supported",
            "--credential-stdin", stdin="not the credential\n",
        )  # fmt: skip
        assert (
            refused.returncode == 1 and json.loads(refused.stdout)["code"] == "credential_refused"
        )
        assert not [e for e in emu.journal() if e["instruction"] == "reboot"]
        done = tether(
            "operator", "--config", str(config), "--json", "reboot", "arm", "--arm-supported",
            "--credential-stdin", stdin=f"{CREDENTIAL}\n",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["operator"] == "alice" and doc["rebooted_ids"] == [1, 2]
        assert "state" not in doc and set(doc["read_back"]["joints"]) == {"a", "b"}
        assert len([e for e in emu.journal() if e["instruction"] == "reboot"]) == 2


def test_the_stream_off_loopback_needs_tls_and_a_principal(tmp_path: Path) -> None:
    """`[serve] sse` off loopback is served over TLS only, and every request carries a
    principal's bearer token: none is 401, a planner's opens the stream."""
    import ssl

    import httpx
    from tether.devices.credentials import hash_secret

    from tests._listeners import make_cert, require_non_loopback_address
    from tests._secrets import PLANNER

    address = require_non_loopback_address()
    cert = make_cert(tmp_path / "tls", ips=(address,))
    extra = (
        f'\n[serve]\nlease_ms = 1500\nsse = "{address}:0"\n'
        f'\n[tls]\ncert = "{cert.cert}"\nkey = "{cert.key}"\n'
        f'\n[planners.ci]\ntoken = "{hash_secret(PLANNER)}"\nrole = "planner"\n'
    )
    config = serve_config(tmp_path, "/dev/null-unused", extra=extra)
    with daemon(config) as (_, ready):
        url = str(ready["sse"])
        assert url.startswith(f"https://{address}:")
        trust = ssl.create_default_context(cafile=str(cert.cert))
        with httpx.Client(verify=trust, timeout=10) as http:
            assert http.get(url).status_code == 401
            headers = {"Authorization": f"Bearer {PLANNER}"}
            with http.stream("GET", url, headers=headers) as events:
                assert events.status_code == 200
                first = next(line for line in events.iter_lines() if line.startswith("data:"))
                assert json.loads(first[5:])["type"] == "RUN_STARTED"
    # The same address without [tls] is refused before a socket opens.
    (tmp_path / "plain").mkdir()
    plain = serve_config(tmp_path / "plain", "/dev/null-unused", extra=extra.split("\n[tls]")[0])
    refused = tether("serve", "--config", str(plain), timeout=60)
    assert refused.returncode == 2 and "insecure_listener" in refused.stderr


def test_serve_on_postgresql_binds_a_move_to_its_host(
    tmp_path: Path, emu: EmulatorProcess, pg_url: str
) -> None:
    """`tether serve --catalog URL --world URL` keeps the catalog and the world ledger on
    PostgreSQL; a move it admits is bound to `[serve] host_name`, so only this host claims it."""
    from tether.activities import ActivityKey, Catalog

    extra = SERVE + 'host_name = "arm-host-1"\n'
    config = serve_config(tmp_path, emu.path, extra=extra)
    argv = [sys.executable, "-m", "tether", "serve", "--config", str(config)]
    proc = subprocess.Popen(
        [*argv, "--catalog", pg_url, "--world", pg_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        done = run_worker(config)
        assert done.returncode == 0, done.stdout + done.stderr
        key = outcome(done)["key"]
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
        # A second daemon under the same host name on this catalog would claim this host's
        # device work: refused before it touches a device or a record.
        (tmp_path / "twin").mkdir()
        twin = serve_config(tmp_path / "twin", "/dev/null-unused", extra=extra)
        for json_flag in ((), ("--json",)):
            refused = tether(
                "serve", "--config", str(twin), *json_flag, "--catalog", pg_url, "--world", pg_url,
                timeout=60,
            )  # fmt: skip
            assert refused.returncode == 7, refused.stderr
            assert "host_name_taken" in refused.stderr and "'arm-host-1'" in refused.stderr
            assert "Traceback" not in refused.stderr and pg_url not in refused.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert pg_url not in err  # a store URL is never logged
    world, kind, activity = key.split("/", 2)
    catalog = Catalog.open(pg_url)
    try:
        record = catalog.get(ActivityKey(world, kind, activity))
    finally:
        catalog.close()
    assert record is not None and record.settlement is not None
    assert record.bound_host == "arm-host-1"
    # Nothing of it in the data dir's SQLite files: the daemon used the URLs.
    data_dir = config.parent / "state" / "moves"
    assert not (data_dir / "catalog.db").exists() and not (data_dir / "world.db").exists()


def _following(config: Path, activity: str) -> subprocess.Popen[str]:
    """`tether move --json` through the daemon, its stdout read line by line."""
    argv = [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot", "arm"]
    argv += ["--activity", activity, "--joint", "a=1.4", "--joint", "b=-1.4", "--json"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until_progress(move: subprocess.Popen[str]) -> None:
    assert move.stdout is not None
    for line in move.stdout:
        if json.loads(line).get("progress", {}).get("fraction", 0) > 0:
            return
    raise AssertionError("no progress before the move's output ended")


def _interrupted(
    move: subprocess.Popen[str], sig: signal.Signals = signal.SIGINT
) -> tuple[str, str]:
    """SIGINT (Ctrl-C), or ``sig``, to a `tether move` once its move reported progress; its
    output after that, once it exited 130."""
    try:
        _until_progress(move)
        move.send_signal(sig)
        out, err = move.communicate(timeout=60)
    finally:
        move.kill()
    assert move.returncode == 130, (out, err)
    return out, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_move_whose_follower_is_interrupted_goes_on_and_says_so(
    tmp_path: Path, sig: signal.Signals
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:  # real-time shafts: a long move
        config = serve_config(tmp_path, emu.path)
        with daemon(config):
            out, _err = _interrupted(_following(config, "followed"), sig)
            last = json.loads(out.strip().splitlines()[-1])
            assert (last["status"], last["reason"]) == ("pending", "interrupted"), last
            assert "goes on in tether serve" in last["error"]
            # It went on: the daemon concluded it, and the same command shows that.
            client = Client(config=config)
            done = watch_until(client, last["key"], ("done",), 120)
            assert done["state"] == "done"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_standalone_move_ended_by_sigterm_stops_its_robot_as_on_ctrl_c(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM (systemd, `timeout`) or SIGHUP (a closed ssh session) to a `tether move` that
    runs the move itself: the robot's stop policy is applied and the move left to reconcile,
    as on Ctrl-C. It used to die with the default action (exit 143 or 129, no outcome) while
    the arm drove on to its goal."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:  # real-time shafts: a long move
        config = serve_config(tmp_path, emu.path)  # no daemon: the move runs in the command
        out, err = _interrupted(_following(config, "termed"), sig)
        last = json.loads(out.strip().splitlines()[-1])
        assert (last["status"], last["reason"]) == ("pending", "interrupted"), (last, err)
        assert "stop policy was applied" in last["error"]
        # Held where it was (the hold policy): not driving on to 1.4 rad.
        goal = tables.radians_to_ticks(1.4)
        time.sleep(1.0)
        state = emu.request(op="snapshot", id=1)
        assert state["goal_position"] != goal and not state["moving"], state
        # The same command again reconciles it from a read-back: cut short by its stop, it
        # awaits an operator (never driven on by itself).
        again = tether(
            "move", "--config", str(config), "--robot", "arm", "--activity", "termed",
            "--joint", "a=1.4", "--joint", "b=-1.4", "--json",
        )  # fmt: skip
        assert again.returncode == 3, again.stdout + again.stderr
        parked = json.loads(again.stdout.strip().splitlines()[-1])
        assert parked["reason"] == "stopped_at_shutdown", parked


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_daemon_killed_under_a_followed_move_is_not_reported_as_a_refusal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM too: the daemon answered the follower while it shut down (`host_closed`), and
    the follower said "it goes on with the move" (`daemon_failed`) of a daemon that had
    safe-stopped the arm and was exiting."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = serve_config(tmp_path, emu.path)
        with daemon(config) as (proc, _ready):
            move = _following(config, "orphaned")
            try:
                _until_progress(move)
                proc.send_signal(sig)
                out, _err = move.communicate(timeout=60)
            finally:
                move.kill()
        assert move.returncode == 4, out
        last = json.loads(out.strip().splitlines()[-1])
        assert (last["status"], last["reason"]) == ("pending", "daemon_lost"), last
        assert "goes on with the move" not in last["error"], last
        assert last["key"].endswith("/orphaned")


def test_a_reissue_of_a_move_on_a_latched_robot_is_refused_and_decides_nothing(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = serve_config(tmp_path, emu.path)
        with daemon(config):
            client = Client(config=config)
            kind = "physical_ai.robot_move.absolute"
            view = client.submit(
                "local", "held", kind, {"robot": "arm", "targets": {"a": 1.4, "b": -1.4}}
            )
            watch_until(client, view["key"], ("moving",), 60)
            assert tether("stop", "--config", str(config), "--json").returncode == 0
            parked = watch_until(client, view["key"], ("awaiting_decision",), 60)
            stopped_at = len(emu.journal())
            decided = tether(
                "operator", "--config", str(config), "--json", "resolve", view["key"],
                "--decision", "reissue", "--revision", str(parked["revision"]),
                "--credential-stdin", stdin=f"{CREDENTIAL}\n",
            )  # fmt: skip
            assert decided.returncode == 1, decided.stdout + decided.stderr
            assert json.loads(decided.stdout)["code"] == "robot_latched", decided.stdout
            now = client.get(view["key"])
            assert (now["state"], now["revision"]) == ("awaiting_decision", parked["revision"])
            assert effectful(emu.journal()[stopped_at:]) == []


@pytest.mark.parametrize(
    ("stopped", "sig"),
    [(False, signal.SIGTERM), (True, signal.SIGTERM), (False, signal.SIGHUP)],
    ids=["restarted", "stopped_then_restarted", "sighup_restarted"],
)
def test_a_move_cut_by_the_daemons_own_shutdown_is_parked_as_stopped_at_shutdown(
    tmp_path: Path, stopped: bool, sig: signal.Signals
) -> None:
    """SIGTERM mid-move: the daemon holds the arm where it is; after the restart the move's
    reconcile names that stop, not a lost or moved device. A `tether stop` while no daemon
    runs (before the restart) cut nothing of the move: it was named as the move's cause.
    SIGHUP (a closed ssh session) is a shutdown too: it killed the daemon with no safe-stop,
    and the arm drove on to its goal."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = serve_config(tmp_path, emu.path)
        client = Client(config=config)
        with daemon(config) as (proc, _):
            view = _moving(client, "cut", {"a": 1.4, "b": -1.4})
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 0
            state = emu.request(op="snapshot", id=1)
            assert state["goal_position"] != tables.radians_to_ticks(1.4), state  # held
        if stopped:
            done = subprocess.run(
                [sys.executable, "-m", "tether", "stop", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stdout + done.stderr
        with daemon(config):
            parked = watch_until(client, view["key"], ("awaiting_decision",), 90)
        assert parked["reason"] == "stopped_at_shutdown", parked


def test_the_daemons_live_stream_shows_a_settled_move_as_settled(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    import urllib.request

    config = serve_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        done = run_worker(config, activity="shown")
        assert done.returncode == 0, done.stdout + done.stderr
        client = Client(config=config)
        final = list(client.watch(outcome(done)["key"], timeout=60))[-1]
        assert final["settled"] is True
        seen = b""
        deadline = time.monotonic() + 30
        with urllib.request.urlopen(ready["sse"], timeout=5) as stream:
            while time.monotonic() < deadline:
                line = stream.readline()
                seen += line
                if b'"settled"' in line and b"shown" in line:
                    break
        assert b'"settled"' in seen, seen[-2000:]


def test_an_interrupted_standalone_move_ends_with_its_outcome_document(tmp_path: Path) -> None:
    """Ctrl-C of a move that runs in `tether move` itself (no daemon): its last JSON line is
    the outcome (`pending`/`interrupted`, exit 130) with its key and what to do, as through a
    daemon; the same command then reconciles it."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:  # real-time shafts: a long move
        config = serve_config(tmp_path, emu.path)
        out, _err = _interrupted(_following(config, "cut"))
        last = json.loads(out.strip().splitlines()[-1])
        assert (last["status"], last["reason"]) == ("pending", "interrupted"), last
        assert last["key"].endswith("/cut") and "same command" in last["error"]
        argv = [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot"]
        argv += ["arm", "--activity", "cut", "--joint", "a=1.4", "--joint", "b=-1.4", "--json"]
        again = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=120,
        )
        final = json.loads(again.stdout.strip().splitlines()[-1])
        assert final["key"] == last["key"] and final["status"] != "pending", final


def test_a_mistake_in_the_host_file_does_not_keep_the_daemon_from_stopping_its_robots(
    tmp_path: Path,
) -> None:
    """`tether stop` with a host file the configuration refuses (a misspelled speed) still
    stops every robot through the running daemon, which uses the configuration it loaded, and
    says what is wrong first; with no daemon, nothing is sent (exit 2). So does a file that is
    not TOML, as long as its [host] table, read alone, is."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        _stop_with_a_typo(tmp_path, emu)


def _stop_with_a_typo(tmp_path: Path, emu: EmulatorProcess) -> None:
    config = serve_config(tmp_path, emu.path)
    typo = tmp_path / "typo.toml"
    typo.write_text(config.read_text().replace("speed = ", "sped = ", 1))
    assert "sped = " in typo.read_text()
    refused = tether("stop", "--config", str(typo))
    assert refused.returncode == 2 and "unknown_key" in refused.stderr, refused.stderr
    assert effectful(emu.journal()) == [], "no daemon: nothing is sent"
    no_daemon = tether("status", "--config", str(typo))
    assert no_daemon.returncode == 2 and "unknown_key" in no_daemon.stderr, no_daemon.stderr
    client = Client(config=config)
    with daemon(config):
        view = _moving(client, "typo-stop", {"a": 1.2, "b": -1.2})
        done = tether("stop", "--config", str(typo), "--json")
        assert done.returncode == 0, done.stderr
        warning = done.stderr.strip().splitlines()
        assert (
            len(warning) == 1 and "warning: unknown_key" in warning[0] and str(typo) in warning[0]
        )
        assert f"({config})" in warning[0]  # the daemon's own host file, which it stops with
        reports = json.loads(done.stdout)
        assert [(r["robot"], r["ok"], r["via"]) for r in reports] == [("arm", True, "owner")]
        parked = watch_until(client, view["key"], ("awaiting_decision",), 60)
        assert parked["reason"] == "stopped_by_operator", parked
        # `tether status` of the same file shows the running daemon's status after the same
        # warning (it refused the file, exit 2, daemon or not).
        status = tether("status", "--config", str(typo), "--json")
        assert status.returncode == 0, status.stderr
        assert "warning: unknown_key" in status.stderr, status.stderr
        assert "arm" in json.dumps(json.loads(status.stdout)), status.stdout
        words = tether("stop", "--config", str(typo), "--robot", "nosuch")
        assert words.returncode == 1 and "nosuch" in words.stdout, words
        # A file whose robots table itself is wrong names no robot: the daemon stops its own.
        broken = tmp_path / "broken.toml"
        broken.write_text(config.read_text().replace("[robots.arm]", "[robot.arm]", 1))
        assert "[robot.arm]" in broken.read_text()
        every = tether("stop", "--config", str(broken), "--json")
        assert every.returncode == 0, every.stderr
        assert [r["robot"] for r in json.loads(every.stdout)] == ["arm"]
        # A file that is not TOML (mid-edit: an unclosed table header past [host]) still
        # names its state dir in its [host] table, read alone: the daemon there stops.
        cut = tmp_path / "cut.toml"
        cut.write_text(config.read_text().replace("[robots.arm]", "[robots.arm", 1))
        syntax = tether("stop", "--config", str(cut), "--json")
        assert syntax.returncode == 0, syntax.stderr
        assert "warning: bad_toml" in syntax.stderr and str(config) in syntax.stderr
        assert [(r["robot"], r["via"]) for r in json.loads(syntax.stdout)] == [("arm", "owner")]
        # One whose [host] table is itself not TOML names no state dir for certain: refused.
        torn = tmp_path / "torn.toml"
        torn.write_text(config.read_text().replace("state_dir = ", "state_dir == ", 1))
        unsure = tether("stop", "--config", str(torn))
        assert unsure.returncode == 2 and "bad_toml" in unsure.stderr, unsure


def test_a_submit_the_daemon_does_not_answer_is_pending_not_a_refusal(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """A daemon that takes the submit and answers nothing in time (stalled: here, stopped with
    SIGSTOP) may still commit and run the move: `tether move` says it is pending and how to
    follow it (exit 4), not that the daemon could not be reached; the same command once it
    answers again follows the move, which runs once."""
    config = serve_config(tmp_path, emu.path)
    argv = [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot", "arm"]
    argv += ["--activity", "stalled", "--joint", "a=0.5", "--joint", "b=-0.5", "--json"]
    with daemon(config) as (proc, _):
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            first = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert first.returncode == 4, (first.stdout, first.stderr)
        doc = json.loads(first.stdout.strip().splitlines()[-1])
        assert doc["status"] == "pending" and doc["reason"] == "unanswered", doc
        assert "run the same command again" in doc["error"]
        again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, (again.stdout, again.stderr)
        assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "done"
    actions = [e for e in emu.journal() if e["instruction"] == "action" and e["executed"]]
    assert sorted(e["id"] for e in actions) == [1, 2], actions  # one motion: an ACTION a joint


def test_a_standalone_move_on_a_latched_robot_prints_its_outcome_and_no_runtime_chatter(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """Its attempt ends with the latch's typed error, which the runtime logs for a daemon's
    operators; `tether move` itself prints only its outcome (parked, `robot_latched`)."""
    config = serve_config(tmp_path, emu.path)
    stopped = tether("stop", "--config", str(config))  # latched (1: a fresh arm is limp)
    assert stopped.returncode in (0, 1) and "arm (safe_stop" in stopped.stdout, stopped.stderr
    argv = ["move", "--config", str(config), "--robot", "arm", "--activity", "latched"]
    for extra in ((), ("--json",)):
        done = tether(*argv, "--joint", "a=0.2", *extra)
        assert done.returncode == 3, (done.stdout, done.stderr)
        assert "leaving it to reconcile" not in done.stderr, done.stderr
        assert "robot_latched" in done.stdout


def test_status_names_the_config_file_absolutely_whatever_cwd_served_it(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = serve_config(tmp_path, emu.path)
    argv = [sys.executable, "-m", "tether", "serve", "--config", config.name, "--json"]
    with subprocess.Popen(
        argv, cwd=config.parent, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and json.loads(proc.stdout.readline())["ready"]
            assert Client(config=config).status()["daemon"]["config"] == str(config)
        finally:
            proc.terminate()
            proc.wait(60)


def test_a_move_whose_reader_goes_away_runs_to_its_end_without_an_error_per_line(
    tmp_path: Path,
) -> None:
    """`tether move ... | head -1`: the move went on, and stderr got one `progress listener
    failed: [Errno 32] Broken pipe` line (with a traceback) per progress event."""
    import shlex

    with emulator_process(tmp_path, speed_scale=4.0) as emu:
        config = serve_config(tmp_path, emu.path)  # no daemon: the move runs in the command
        argv = [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot",
                "arm", "--activity", "piped", "--joint", "a=0.8", "--joint", "b=-0.8",
                "--json"]  # fmt: skip
        done = subprocess.run(
            ["bash", "-c", f"{shlex.join(argv)} | head -1; exit ${{PIPESTATUS[0]}}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 1  # head's one line
        assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert emu.request(op="snapshot", id=1)["goal_position"] == tables.radians_to_ticks(0.8)
