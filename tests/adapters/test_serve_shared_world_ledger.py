"""Two robot hosts' `tether serve` daemons on one PostgreSQL catalog and world ledger, each over
its own emulated DYNAMIXEL arm (a process of its own on a real pty). A world has one writer:
on a shared ledger each daemon writes, recovers and observes only its own host's worlds
(`<id>@<host_name>`), so a daemon that starts or restarts never fences the other's."""

from __future__ import annotations

import json
from pathlib import Path

from _dxl_setup import GOALS, emulator_process, outcome, run_worker, target_actions

from tests._serve import SERVE, daemon, operator, serve_config, tether


def _host(tmp_path: Path, name: str, emu_path: str, pg_url: str) -> Path:
    directory = tmp_path / name
    directory.mkdir(exist_ok=True)
    extra = SERVE + f'host_name = "arm-host-{name}"\ncatalog = "{pg_url}"\nworld = "{pg_url}"\n'
    return serve_config(directory, emu_path, extra=extra)


def test_two_daemons_on_one_shared_ledger_write_their_own_worlds(
    tmp_path: Path, pg_url: str
) -> None:
    (tmp_path / "emu-a").mkdir()
    (tmp_path / "emu-b").mkdir()
    with (
        emulator_process(tmp_path / "emu-a") as emu_a,
        emulator_process(tmp_path / "emu-b") as emu_b,
    ):
        a = _host(tmp_path, "a", emu_a.path, pg_url)
        b = _host(tmp_path, "b", emu_b.path, pg_url)
        with daemon(b):
            with daemon(a):
                for config, host in ((a, "a"), (b, "b")):
                    done = run_worker(config, activity="m1")
                    assert done.returncode == 0, done.stdout + done.stderr
                    key = outcome(done)["key"]
                    assert key.startswith(f"local@arm-host-{host}/"), key
            # Host a restarts: it takes over its own worlds, and b's stay b's.
            with daemon(a):
                for config in (b, a):
                    done = run_worker(config, activity="m2", joints={"a": -0.2, "b": 0.4})
                    assert done.returncode == 0, done.stdout + done.stderr
                    assert outcome(done)["status"] == "done", outcome(done)
                # Writing another host's world is refused, and fences nothing.
                refused = run_worker(b, "--world", "local@arm-host-a", activity="m3")
                assert refused.returncode == 2, refused.stdout + refused.stderr
                assert "world_of_another_host" in refused.stdout, refused.stdout
                done = run_worker(a, activity="m3")
                assert done.returncode == 0, done.stdout + done.stderr
                # A move parked on host a is a's to decide: b's daemon lists it with its host
                # and refuses to decide it (a's daemon reads a's arm).
                assert tether("stop", "--config", str(a)).returncode == 0
                parked = run_worker(a, activity="m4")
                assert outcome(parked)["status"] == "awaiting_decision", outcome(parked)
                listed = operator(b, "list")
                (item,) = json.loads(listed.stdout)
                assert item["host"] == "arm-host-a" and item["key"].startswith("local@arm-host-a/")
                refused = operator(
                    b, "resolve", item["key"], "--decision", "abandon", "--revision",
                    str(item["revision"]),
                )  # fmt: skip
                assert "bound_elsewhere" in refused.stdout + refused.stderr, refused.stdout
                decided = operator(
                    a, "resolve", item["key"], "--decision", "abandon", "--revision",
                    str(item["revision"]),
                )  # fmt: skip
                assert decided.returncode == 0, decided.stdout + decided.stderr
        # Each arm ran its own moves once: m1 and m3 drive the same goals.
        assert target_actions(emu_a.journal(), GOALS) == {1: 2, 2: 2}
        assert target_actions(emu_b.journal(), GOALS) == {1: 1, 2: 1}


def test_a_host_name_that_cannot_name_worlds_is_refused_on_a_shared_ledger(
    tmp_path: Path, pg_url: str
) -> None:
    """On a shared world ledger the host name names this host's worlds: one with a space, an
    `@` or a `/` is `bad_host_name` (exit 2) before anything opens."""
    for name in ("Arm Host 1", "lab@x", "a/b"):
        config = tmp_path / name.replace("/", "_") / "host.toml"
        config.parent.mkdir(parents=True)
        extra = SERVE + f'host_name = "{name}"\ncatalog = "{pg_url}"\nworld = "{pg_url}"\n'
        config = serve_config(config.parent, "/dev/null-unused", extra=extra)
        refused = tether("serve", "--config", str(config), timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert "bad_host_name" in refused.stderr and "Traceback" not in refused.stderr
        assert repr(name) in refused.stderr, refused.stderr
