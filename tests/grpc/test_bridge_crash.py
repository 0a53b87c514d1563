"""Crash tests of the bridge worker: a `tether serve` of its own running `physical_ai.remote_move`
(`[serve] families = ["tether.adapters.grpc.bridge:serve_families"]`, `[remote]` naming the
robot host and the planner token file) drives a real remote `tether serve` over gRPC on
loopback, with the DYNAMIXEL emulator on a pty underneath. The bridge is SIGKILLed at every
crash point a remote move passes (the runtime's, the daemon's submit, the adapter's), each
listed by name, and restarted without the crash. Then:

- 0 lost outcomes: the Activity settles done with the remote's result (the bridge's stored
  result names the remote operation and the digest the remote reports);
- one remote operation: the planner's only operation on the remote host is the Activity's
  bound provider operation id (never a new id);
- 0 duplicates: the emulator's journal shows exactly one ACTION applying each joint's goal.

Each point must fire (the bridge dies by SIGKILL), so a renamed point fails here. A point a
first attempt never reaches (reconcile's) is reached by a first kill at another point, then the
kill at it in the restarted bridge. The default run samples four; TETHER_SLOW=1 runs them all.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import GOALS, TARGETS, emulator_process, target_actions
from _grpc_setup import SERVE, bearer, grpc_config, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.activities import ActivityKey, Catalog
from tether.adapters.grpc.bridge import load_remote
from tether.adapters.grpc.bridge import submit as bridge_submit
from tether.adapters.grpc.remote import CRASH_POINTS as BRIDGE_POINTS
from tether.adapters.grpc.remote import KIND_ABSOLUTE
from tether.client import Client, ClientError
from tether.errors import HostConfigError, TetherError
from tether.runtime import CRASH_POINTS as RUNTIME_POINTS
from tether.runtime import ArtifactStore
from tether.serve.daemon import CRASH_POINTS as SERVE_POINTS
from tether.testing._ports import free_port

from tests._secrets import PLANNER
from tests._serve import clean_env, daemon, final, killed
from tests.sampling import sampled

#: The runtime's points a remote move never reaches in the bridge, and why.
NOT_ON_A_REMOTE_MOVE = {
    "after_refusal_document": "a remote move is never refused at admission (a request the "
    "remote refuses ends as a recorded failed result)",
    "during_effect": "the sim adapter's point",
}
#: Every crash point of a remote move through the bridge, in the order a move reaches them.
#: A kill before the reply to the submit loses the reply.
SWEEP = (
    "serve.before_submit_tick",
    "after_intent_tick",
    "serve.after_submit",
    "after_admission",
    "after_claim",
    "after_bind",
    "remote.execute_sent",
    "remote.after_execute",
    "remote.mid_watch",
    "remote.reconcile.after_get",
    "artifact_temp_written",
    "remote.after_result_stored",
    "after_effect",
    "after_result",
    "after_staging",
    "after_observation_tick",
    "after_settlement",
)
LOST_REPLY = ("serve.before_submit_tick", "after_intent_tick", "serve.after_submit")
#: Points before the submit's tick is committed: the submit after the restart creates it.
UNCOMMITTED = ("serve.before_submit_tick",)
#: Points only a reconciling attempt reaches: the first kill (at the point given) makes the
#: restarted bridge reconcile, and that one is killed at the point.
FIRST_KILL = {"remote.reconcile.after_get": "remote.after_execute"}
#: The points most telling of a remote move; the default run kills at two of them (a different
#: two each run, `tests/sampling.py`), TETHER_SLOW=1 at every point of `SWEEP`.
TELLING = ("after_bind", "remote.after_execute", "remote.mid_watch", "remote.after_result_stored")
SAMPLED = sampled("bridge crash", TELLING, 2)
WORLD = "bridge"
KEY = f"{WORLD}/{KIND_ABSOLUTE}/move-1"


def test_the_sweep_lists_every_crash_point_of_a_remote_move() -> None:
    defined = set(RUNTIME_POINTS) - set(NOT_ON_A_REMOTE_MOVE) | set(BRIDGE_POINTS)
    defined |= set(SERVE_POINTS)
    assert set(SWEEP) == defined and len(SWEEP) == len(defined)
    assert set(NOT_ON_A_REMOTE_MOVE) <= set(RUNTIME_POINTS)
    assert set(FIRST_KILL) | set(FIRST_KILL.values()) <= set(SWEEP)


def bridge_config(tmp: Path, port: int) -> Path:
    """The bridge host's host.toml: no devices, the remote_move family over `[remote]`. Its
    per-call deadline is generous: on a loaded machine an Execute past it is reconciled
    instead, and the points after its reply would be passed by."""
    home = tmp / "bridge"
    home.mkdir()
    token = home / "planner.token"
    token.write_text(PLANNER + "\n")
    token.chmod(0o600)
    path = home / "host.toml"
    path.write_text(
        f"""
[host]
state_dir = "{home / "state"}"
[serve]
data_dir = "{home / "data"}"
workers = 1
lease_ms = 1500
settle_timeout_s = 20
sse = "off"
live = "off"
families = ["tether.adapters.grpc.bridge:serve_families"]
[remote]
address = "127.0.0.1:{port}"
token_file = "planner.token"
timeout_s = 30
"""
    )
    return path


@contextmanager
def remote_host(tmp: Path) -> Iterator[tuple[Any, str, Path]]:
    """The emulator, and the robot host's `tether serve` with gRPC on a fixed port; the
    emulator, the gRPC address and the bridge's host.toml."""
    port = free_port()
    with emulator_process(tmp, speed_scale=1.0) as emu:  # a move lasts about a second
        config = grpc_config(tmp, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        with daemon(config) as (_, ready):
            assert ready["grpc"] == f"127.0.0.1:{port}", ready
            yield emu, ready["grpc"], bridge_config(tmp, port)


def request() -> dict[str, Any]:
    return {"device": "arm", "targets": TARGETS, "not_after_ms": int(time.time() * 1000) + 300_000}


def remote_operations(address: str) -> list[pb.Operation]:
    channel, control = stub(address)
    try:
        page = control.ListOperations(pb.ListOperationsRequest(page_size=100), metadata=bearer())
        assert not page.next_page_token
        return list(page.operations)
    finally:
        channel.close()


def stored_result(config: Path) -> tuple[str, dict[str, Any]]:
    """The bridge's recorded operation id and result document (read from its catalog and
    artifact store)."""
    data = config.parent / "data"
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    try:
        record = catalog.get(ActivityKey(WORLD, KIND_ABSOLUTE, "move-1"))
    finally:
        catalog.close()
    assert record is not None and record.result is not None and record.operation_id
    raw = ArtifactStore(data / "artifacts").get_bytes(record.result.ref, record.result.digest)
    return record.operation_id, json.loads(raw)


def bridge_killed(proc: subprocess.Popen[str], timeout: float = 90) -> None:
    """`killed`, with the bridge's log in the failure when its point never fired."""
    try:
        killed(proc, timeout)
    except AssertionError as exc:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"{exc} (exit {proc.returncode}): {err[-3000:]}") from None


def _cases() -> list[object]:
    return [pytest.param(p, id=p, marks=() if p in SAMPLED else pytest.mark.slow) for p in SWEEP]


@pytest.mark.parametrize("crash_at", _cases())
def test_the_bridge_killed_at_each_point_of_a_remote_move(tmp_path: Path, crash_at: str) -> None:
    with remote_host(tmp_path) as (emu, address, config):
        client = Client(config=config)
        body = request()
        kills = [FIRST_KILL[crash_at], crash_at] if crash_at in FIRST_KILL else [crash_at]
        for n, point in enumerate(kills):
            with daemon(config, crash_at=point) as (proc, _):
                try:
                    first = client.submit(WORLD, "move-1", KIND_ABSOLUTE, body)
                except ClientError as exc:  # the reply was lost with the bridge (a kill in
                    # a worker thread may win the race with the answer too)
                    assert exc.code == "owner_no_answer", exc
                else:
                    assert point not in LOST_REPLY and first["created"] is (n == 0)
                bridge_killed(proc)  # the point fired: a renamed or unreached one fails here
        assert client.running() is None
        with daemon(config):
            view = client.submit(WORLD, "move-1", KIND_ABSOLUTE, body)
            assert view["created"] is (crash_at in UNCOMMITTED) and view["key"] == KEY
            done = final(client, KEY)
        assert (done["state"], done["settled"]) == ("done", True), done
        assert done["result"]["outcome"] == "completed", done
        # One remote operation, under the Activity's bound provider operation id.
        operations = remote_operations(address)
        assert [op.id for op in operations] == [done["operation_id"]]
        (remote,) = operations
        assert remote.state == pb.SUCCEEDED
        # The bridge settled with the remote's result.
        operation_id, doc = stored_result(config)
        assert operation_id == done["operation_id"] == doc["operation_id"]
        assert doc["state"] == "succeeded" and doc["remote_digest"] == remote.result.digest
        assert doc["result"] == json.loads(remote.result.document)
        journal = emu.journal()
    assert target_actions(journal, GOALS) == {1: 1, 2: 1}


# --- the bridge's configuration and submit ---


def _serve_bridge(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )


def test_a_bad_remote_table_stops_tether_serve_with_a_usage_error(tmp_path: Path) -> None:
    config = bridge_config(tmp_path, 50051)
    config.write_text(config.read_text().replace("timeout_s = 30", "timeout_sec = 30"))
    done = _serve_bridge(config)
    assert done.returncode == 2, done.stderr
    assert "unknown_key" in done.stderr and "remote: unknown key `timeout_sec`" in done.stderr
    assert "did you mean `timeout_s`?" in done.stderr
    assert PLANNER not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (('address = "127.0.0.1:', 'address = "192.0.2.7:'), "insecure_remote"),
        (('address = "127.0.0.1:', 'address = "127.0.0.1:x'), "bad_remote"),
        (("timeout_s = 30", "timeout_s = 0"), "bad_remote"),
        (('token_file = "planner.token"', 'token_file = "absent.token"'), "bad_remote_token"),
        (("timeout_s = 30", 'timeout_s = 30\nca = "planner.token"'), "bad_remote"),
        (('token_file = "planner.token"\n', ""), "missing_key"),
    ],
    ids=[
        "plaintext-off-loopback",
        "bad-address",
        "zero-deadline",
        "missing-token-file",
        "ca-no-pem",
        "no-token-file",
    ],
)
def test_a_bad_remote_table_is_refused_naming_it(
    tmp_path: Path, change: tuple[str, str], code: str
) -> None:
    config = bridge_config(tmp_path, 50051)
    config.write_text(config.read_text().replace(*change))
    with pytest.raises(HostConfigError) as info:
        load_remote(config)
    assert info.value.code == code and "remote" in info.value.message
    assert info.value.message.startswith(f"{config}: "), info.value.message  # its file named
    assert info.value.details["file"] == str(config)
    assert PLANNER not in str(info.value)


def test_tether_serve_refuses_a_bad_remote_host_before_it_takes_or_writes_anything(
    tmp_path: Path,
) -> None:
    """The bridge read `[remote]` as it loaded its family, after the daemon took its state dir,
    said "control socket" and made its stores: a mistake there left a lock and two stores
    behind (and under a running daemon it was `daemon_running`, exit 7)."""
    config = bridge_config(tmp_path, 50051)
    config.write_text(config.read_text().replace('address = "127.0.0.1:', 'address = "192.0.2.7:'))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = _serve_bridge(config)
    assert done.returncode == 2, done.stderr
    assert "insecure_remote" in done.stderr and "control socket" not in done.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    config = bridge_config(tmp_path, 50051)
    (config.parent / "planner.token").chmod(0o644)
    with pytest.raises(HostConfigError) as info:
        load_remote(config)
    assert info.value.code == "bad_remote_token" and "0600" in info.value.message


def test_the_token_is_read_from_its_file_and_never_shown(tmp_path: Path) -> None:
    remote = load_remote(bridge_config(tmp_path, 50051))
    assert (remote.address, remote.token, remote.timeout_s) == ("127.0.0.1:50051", PLANNER, 30)
    assert PLANNER not in repr(remote) and PLANNER not in str(remote)


def test_a_bad_submitted_remote_move_is_refused_before_anything_is_committed() -> None:
    good = request()
    write = bridge_submit("m", KIND_ABSOLUTE, good)
    assert write.value == {**good, "kind": KIND_ABSOLUTE}
    for bad in (
        {**good, "not_after": 5},  # misspelled: never silently dropped
        {k: v for k, v in good.items() if k != "not_after_ms"},
        {**good, "targets": {}},
    ):
        with pytest.raises(TetherError) as info:
            bridge_submit("m", KIND_ABSOLUTE, bad)
        assert getattr(info.value, "code", None) == "bad_request"


def _status(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "status", "--config", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(None),
    )


def test_tether_status_on_the_bridge_host_says_whether_its_robot_host_answers(
    tmp_path: Path,
) -> None:
    """`tether status` on a bridge host said nothing of the robot host its moves go to: not
    its address, not whether it answered. It now asks the robot host's health (no credential)
    and says so, with each of its devices."""
    from contextlib import ExitStack

    port = free_port()
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        robot = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        bridge = bridge_config(tmp_path, port)
        with ExitStack() as robot_host:
            robot_host.enter_context(daemon(robot))
            with daemon(bridge):
                up = _status(bridge, "--json")
                words_up = _status(bridge)
                robot_host.close()  # the robot host stops; the bridge runs on
                down = _status(bridge, "--json")
                words_down = _status(bridge)
    assert up.returncode == 0, up.stderr
    (remote,) = json.loads(up.stdout)["adapters"]
    assert remote["remote"] == f"127.0.0.1:{port}" and remote["answers"] is True, remote
    assert remote["serving"] is True and remote["devices"]["arm"] is True, remote
    assert f"remote robot host 127.0.0.1:{port}: answers, serving; devices: arm serving" in (
        words_up.stdout
    ), words_up.stdout
    assert down.returncode == 0, down.stderr
    (gone,) = json.loads(down.stdout)["adapters"]
    assert gone["answers"] is False and gone["error"].startswith("UNAVAILABLE"), gone
    assert f"remote robot host 127.0.0.1:{port}: no answer" in words_down.stdout, words_down
    assert PLANNER not in up.stdout + down.stdout + words_up.stdout + words_down.stdout
