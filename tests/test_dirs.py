"""Private state and data dirs: created 0700, files 0600, foreign/loose/symlinked ones refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tether._dirs import DataDirError, default_state_dir, usable_dir
from tether.activities import Catalog
from tether.devices.credentials import RateLimiter
from tether.devices.latch import StopLatch
from tether.devices.ports import IdentityLock
from tether.operations._durable import write_durable

NOBODY = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_new_dir_is_0700_and_files_created_under_it_are_0600(tmp_path: Path) -> None:
    state = usable_dir(tmp_path / "a" / "state", what="host.state_dir")
    assert mode(state) == 0o700
    assert mode(tmp_path / "a") == 0o700  # parents Tether creates are private too
    StopLatch(state).latch("arm")
    RateLimiter(state / "auth" / "failures.json").failed()
    lock = IdentityLock(state, "url:loop://")
    lock.acquire("/nowhere.sock")
    lock.release()
    write_durable(state / "journal.json", b"{}")  # names 0o644 itself: the umask wins
    data = usable_dir(tmp_path / "data", what="--data-dir")
    catalog = Catalog.open(f"sqlite:///{data / 'catalog.db'}")
    catalog.close()
    created = [p for p in [*state.rglob("*"), *data.rglob("*")]]
    assert {p.name for p in created} >= {"latches", "auth", "failures.json", "journal.json"}
    assert any(p.name == "catalog.db" for p in created)
    for p in created:
        assert mode(p) == (0o700 if p.is_dir() else 0o600), p


@pytest.mark.parametrize("loose", [0o777, 0o770, 0o722, 0o1777])
def test_a_pre_created_dir_others_may_write_is_refused(tmp_path: Path, loose: int) -> None:
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, loose)
    with pytest.raises(DataDirError) as info:
        usable_dir(d, what="host.state_dir")
    assert info.value.code == "insecure_directory"
    assert str(d) in info.value.message and f"chmod 700 {d}" in info.value.message
    assert mode(d) == loose  # refused, not silently changed


def test_one_of_ours_others_may_only_read_is_tightened(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    assert usable_dir(d, what="--data-dir") == d
    assert mode(d) == 0o700


def test_a_dir_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "this test needs root to give a directory away"
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    os.chown(d, NOBODY, NOBODY)
    with pytest.raises(DataDirError) as info:
        usable_dir(d, what="host.state_dir")
    assert info.value.code == "foreign_directory"
    assert info.value.details["owner_uid"] == NOBODY
    assert str(d) in info.value.message


def test_a_dir_under_a_parent_of_another_uid_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, NOBODY, NOBODY)
    with pytest.raises(DataDirError) as info:
        usable_dir(parent / "state", what="host.state_dir")
    assert info.value.code == "insecure_directory"
    assert info.value.details["ancestor"] == str(parent)


def test_a_dir_under_a_world_writable_non_sticky_parent_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    with pytest.raises(DataDirError) as info:
        usable_dir(parent / "state", what="host.state_dir")
    assert info.value.code == "insecure_directory"
    os.chmod(parent, 0o1777)  # sticky, like /tmp: nobody can rename our directory away
    assert mode(usable_dir(parent / "state", what="host.state_dir")) == 0o700


@pytest.mark.parametrize("target_kind", ["own_dir", "foreign_dir", "dangling"])
def test_a_symlinked_state_dir_is_refused(tmp_path: Path, target_kind: str) -> None:
    target = tmp_path / "elsewhere"
    if target_kind != "dangling":
        target.mkdir(mode=0o700)
    if target_kind == "foreign_dir":
        os.chown(target, NOBODY, NOBODY)
    link = tmp_path / "state"
    link.symlink_to(target)
    with pytest.raises(DataDirError) as info:
        usable_dir(link, what="host.state_dir")
    assert info.value.code == "symlinked_directory"
    assert str(link) in info.value.message
    assert not (target / "latches").exists()


def test_the_pre_created_tmp_path_of_the_old_default_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = default_state_dir()
    assert default == tmp_path / "home" / ".local" / "state" / "tether"
    assert not str(default).startswith("/tmp/tether-")
    assert mode(usable_dir(default, what="host.state_dir")) == 0o700


def test_the_default_state_dir_is_the_same_whatever_the_xdg_variables_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A login shell sets `XDG_RUNTIME_DIR` (emptied at logout and boot), a service or cron job
    may set neither it nor `XDG_STATE_HOME`: each must find the latches the other made."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    want = tmp_path / "home" / ".local" / "state" / "tether"
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    for env in ({}, {"XDG_RUNTIME_DIR": str(runtime)}, {"XDG_STATE_HOME": str(tmp_path / "x")}):
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert default_state_dir() == want, env


def test_tether_stop_refuses_a_state_dir_another_user_pre_created(tmp_path: Path) -> None:
    """The attack of issue 12: another local user pre-creates the state dir and would answer
    `tether stop` from it. The CLI refuses in one line, exit 2, naming the path."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{state}"\n[ports.bus]\nurl = "loop://"\n'
        '[robots.arm]\nport = "bus"\n[[robots.arm.joints]]\nname = "j"\nid = 1\n'
        "min = -1.0\nmax = 1.0\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "tether", "stop", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert str(state) in lines[0] and "owned by uid 65534" in lines[0]
    assert not (state / "latches").exists()


@pytest.mark.parametrize("case", ["loose", "symlink", "foreign", "file"])
def test_tether_worker_checks_its_data_dir_as_serve_does(tmp_path: Path, case: str) -> None:
    """`tether worker DATA_DIR` refuses a data dir another user could control (or a file) in
    one line, exit 2, before its families or stores make anything in it."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    data = tmp_path / "data"
    expected = {
        "loose": "insecure_directory",
        "symlink": "symlinked_directory",
        "foreign": "foreign_directory",
        "file": "not_a_directory",
    }[case]
    if case == "loose":
        data.mkdir()
        data.chmod(0o777)
    elif case == "symlink":
        data.symlink_to(real)
    elif case == "foreign":
        data.mkdir(mode=0o700)
        os.chown(data, NOBODY, NOBODY)
    else:
        data.write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "tether", "worker", str(data), "--families", "no_such_mod:f"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith(f"tether worker: {expected}: "), lines[0]
    assert str(data) in lines[0]
    made = list(real.iterdir()) + (list(data.iterdir()) if data.is_dir() else [])
    assert made == [], made


def test_latches_left_in_an_old_default_state_dir_are_never_skipped_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier Tether kept the default state dir under `$XDG_RUNTIME_DIR` (or
    `$XDG_STATE_HOME`): a host file that leaves `state_dir` unset is refused while that old
    place holds latches or a daemon's lock, naming it and what to set."""
    from tether._config import HostConfigError
    from tether.devices.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    run = tmp_path / "run"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    config = tmp_path / "host.toml"
    config.write_text("")
    assert load_config(config).state_dir == tmp_path / "home" / ".local" / "state" / "tether"
    (run / "tether" / "latches").mkdir(parents=True)
    assert load_config(config).state_dir.name == "tether"  # an empty latch dir is no record
    (run / "tether" / "latches" / "arm.json").write_text("{}")
    with pytest.raises(HostConfigError) as info:
        load_config(config)
    assert info.value.code == "legacy_state_dir"
    assert f'state_dir = "{run / "tether"}"' in str(info.value)
    config.write_text(f'[host]\nstate_dir = "{tmp_path / "mine"}"\n')  # said: used as said
    assert load_config(config).state_dir == tmp_path / "mine"


def test_a_tolerated_refusal_passes_only_inside_its_block(tmp_path: Path) -> None:
    """`tolerating` (a stop's) lets a loose or symlinked dir of one's own pass in its block
    and in this context only; a symlink is then checked as the dir it points to, and nothing
    else is ever tolerated."""
    from tether._dirs import check_private_dir, tolerating

    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    for path, code in ((link, "symlinked_directory"), (real, "insecure_directory")):
        real.chmod(0o770 if code == "insecure_directory" else 0o700)
        with pytest.raises(DataDirError) as refused:
            check_private_dir(path, what="x")
        assert refused.value.code == code
        with tolerating("insecure_directory", "symlinked_directory"):
            assert check_private_dir(path, what="x") == path
        with pytest.raises(DataDirError):
            check_private_dir(path, what="x")
    assert oct(real.stat().st_mode & 0o777) == "0o770"  # tolerated: never changed
    real.chmod(0o777)
    with tolerating("symlinked_directory"), pytest.raises(DataDirError) as refused:
        check_private_dir(link, what="x")  # the dir it points to is still checked
    assert refused.value.code == "insecure_directory"
    with pytest.raises(ValueError):
        with tolerating("foreign_directory"):
            pass


def test_every_command_but_a_stop_refuses_a_symlinked_state_dir(tmp_path: Path) -> None:
    """`tether stop` refused a symlinked state dir while `move`, `status` and `operator`
    worked through it (they checked the dirs under it only): a stop stricter than a move.
    Now the stop says so and goes (tested with the emulator), and the others refuse it."""
    real = tmp_path / "state"
    real.mkdir(mode=0o700)
    link = tmp_path / "state-link"
    link.symlink_to(real)
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{link}"\n[ports.p]\nurl = "{tmp_path / "no-tty"}"\n'
        '[robots.arm]\nport = "p"\n[[robots.arm.joints]]\nname = "a"\nid = 1\nmin = -1\nmax = 1\n'
    )
    for argv in (
        ("move", "--config", str(config), "--robot", "arm", "--joint", "a=0.1", "--activity", "m"),
        ("status", "--config", str(config)),
        ("operator", "--config", str(config), "list"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "tether", *argv], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "symlinked_directory: host.state_dir" in done.stderr, (argv, done.stderr)
    assert sorted(p.name for p in real.iterdir()) == []  # nothing was made through it
