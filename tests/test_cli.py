"""The `tether` command line on bad paths: one line naming the problem, a documented exit code,
no traceback, nothing created where it should not be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether._dirs import DataDirError, usable_dir

CONFIG = """
[host]
state_dir = "{state_dir}"
[ports.bus]
url = "/dev/does-not-exist"
[robots.arm]
port = "bus"
[[robots.arm.joints]]
name = "a"
id = 1
min = -1
max = 1
"""


def tether(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "not-a-dir"
    path.write_text("precious\n")
    return path


def config_with_state_dir(tmp_path: Path, state_dir: Path) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(CONFIG.format(state_dir=state_dir))
    return path


def one_line(done: subprocess.CompletedProcess[str], prefix: str) -> str:
    assert "Traceback" not in done.stderr + done.stdout
    text = (done.stderr or done.stdout).strip()
    assert "\n" not in text and text.startswith(prefix), text
    return text


@pytest.mark.parametrize(
    ("argv", "code", "prefix"),
    [
        (["demo", "--port", "0", "--data-dir", "{file}"], 2, "tether demo: not_a_directory:"),
        (["demo", "--port", "0", "--data-dir", "{file}/sub"], 2, "tether demo: not_a_directory:"),
        (
            ["operator", "--config", "{config}", "--data-dir", "{file}", "list"],
            2,
            "tether operator: not_a_directory:",
        ),
        (["stop", "--config", "{state_is_file}"], 2, "tether stop: not_a_directory:"),
        (["host", "serve", "--config", "{state_is_file}"], 2, "tether host: not_a_directory:"),
        (
            [
                "move",
                "--config",
                "{state_is_file}",
                "--robot",
                "arm",
                "--activity",
                "m",
                "--joint",
                "a=0.1",
            ],
            2,
            "tether move: not_a_directory:",  # piped: its JSON on stdout, this line on stderr
        ),
    ],
)
def test_a_data_dir_that_is_a_file_is_one_line(
    tmp_path: Path, a_file: Path, argv: list[str], code: int, prefix: str
) -> None:
    names = {
        "file": str(a_file),
        "config": str(config_with_state_dir(tmp_path, tmp_path / "state")),
    }
    state_is_file = tmp_path / "file-state.toml"
    state_is_file.write_text(CONFIG.format(state_dir=a_file))
    names["state_is_file"] = str(state_is_file)
    done = tether(*(a.format(**names) for a in argv))
    assert done.returncode == code, (done.stdout, done.stderr)
    assert str(a_file) in one_line(done, prefix)
    assert a_file.read_text() == "precious\n"  # nothing lost


def test_a_worker_on_a_file_is_one_line_from_the_dispatcher(tmp_path: Path, a_file: Path) -> None:
    config = config_with_state_dir(tmp_path, tmp_path / "state")
    families = "tether.families.robot_move.family:families_from_env"
    done = tether(
        "worker", str(a_file), "--families", families, env={"TETHER_HOST_CONFIG": str(config)}
    )
    assert done.returncode == 2  # a data dir that is a file: usage, whichever command
    assert str(a_file) in one_line(done, "tether worker: not_a_directory: worker data_dir")
    assert a_file.read_text() == "precious\n"


def test_a_worker_on_a_missing_sqlite_data_dir_is_refused_and_makes_nothing(
    tmp_path: Path,
) -> None:
    """On SQLite a worker opens DATA_DIR/catalog.db of a Host or `tether serve`: a data dir
    that does not exist is a mistyped one, refused (exit 2, `no_such_directory`), never made
    with an empty catalog the worker would wait on for ever."""
    families = "tether.families.sim.adapter:worker_families"
    typo = tmp_path / "tether-dta"
    done = tether("worker", str(typo), "--families", families)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_line(done, "tether worker: no_such_directory: worker data_dir")
    assert str(typo) in line and "nothing was created" in line
    assert not typo.exists()


def test_a_worker_for_another_host_than_its_robots_is_refused(tmp_path: Path) -> None:
    """A worker claiming host "arm-host-a"'s device work with a configuration whose robots are
    "arm-host-b"'s would run a's moves on b's arm: refused before anything opens (exit 2), one
    line naming both hosts. The configuration's own host name is accepted."""
    config = config_with_state_dir(tmp_path, tmp_path / "state")
    config.write_text(config.read_text() + '[serve]\nhost_name = "arm-host-b"\n')
    families = "tether.families.robot_move.family:families_from_env"
    env = {"TETHER_HOST_CONFIG": str(config)}
    data = tmp_path / "data"
    data.mkdir()
    done = tether("worker", str(data), "--families", families, "--host", "arm-host-a", env=env)
    assert done.returncode == 2, done.stderr
    line = one_line(done, "tether worker: bad_families: family physical_ai.robot_move drives")
    assert "'arm-host-b'" in line and "'arm-host-a' (--host)" in line
    assert "pass --host arm-host-b" in line
    assert not (data / "catalog.db").exists()  # nothing opened


def test_usable_dir_creates_a_missing_directory_and_refuses_files(
    tmp_path: Path, a_file: Path
) -> None:
    assert usable_dir(tmp_path / "a" / "b", what="x") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    for path, code in (
        (a_file, "not_a_directory"),
        (a_file / "under", "not_a_directory"),
    ):
        with pytest.raises(DataDirError) as info:
            usable_dir(path, what="--data-dir")
        assert info.value.code == code and info.value.details["file"] == str(a_file)
    with pytest.raises(DataDirError) as info:
        usable_dir(tmp_path / "missing", what="--data-dir", create=False)
    assert info.value.code == "no_such_directory" and not (tmp_path / "missing").exists()


def test_stop_on_a_host_with_no_robot_says_nothing_was_stopped(tmp_path: Path) -> None:
    """A bridge host (its robots on another host, over gRPC) configures no robot: `tether
    stop` there says nothing was stopped and where to stop them, never an empty success."""
    config = tmp_path / "host.toml"
    config.write_text(f'[host]\nstate_dir = "{tmp_path / "state"}"\n')
    for extra in ((), ("--json",)):
        done = subprocess.run(
            [sys.executable, "-m", "tether", "stop", "--config", str(config), *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "no_robot" in done.stderr and "nothing was stopped" in done.stderr
        if extra:
            assert json.loads(done.stdout)["code"] == "no_robot"


def test_operator_list_and_show_on_a_host_where_nothing_ran_make_nothing(tmp_path: Path) -> None:
    """Standalone `list` and `show` are read-only: on a fresh host they answer (nothing awaits
    a decision; no such activity) and create no state dir, data dir or catalog."""
    config = tmp_path / "host.toml"
    config.write_text(f'[host]\nstate_dir = "{tmp_path / "state"}"\n')
    listed = tether("operator", "--config", str(config), "--json", "list")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    shown = tether("operator", "--config", str(config), "--json", "show", "local/k/x")
    assert shown.returncode == 1 and json.loads(shown.stdout)["code"] == "unknown_activity"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host.toml"]


@pytest.mark.parametrize("wrapper", [ImportError, RuntimeError, OSError])
def test_an_interrupt_a_library_wrapped_is_an_interruption(
    wrapper: type[Exception], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during an import (mujoco's "initialization failed") or a class's creation
    reaches the command wrapped in another error: it was an internal error, a traceback and
    exit 70. It is an interruption (exit 130), as a bare one is."""
    import types

    from tether import _exit, cli

    def main(argv: list[str]) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise wrapper("initialization failed") from exc

    module = types.ModuleType("tether_test_wrapped_interrupt")
    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, "wrapped", (module.__name__, "a test command"))
    assert cli.main(["wrapped"]) == _exit.INTERRUPTED
    said = capsys.readouterr()
    assert "Traceback" not in said.err and "internal error" not in said.err, said.err
    assert "interrupted" in said.err


def test_a_worker_whose_stream_address_is_taken_says_sse_unavailable(tmp_path: Path) -> None:
    """`tether worker --sse-port` on a port another listener holds: "ready", then an uncoded
    line and exit 2 (a usage error), where `tether serve` and `tether demo` say
    `sse_unavailable`, exit 7."""
    import socket

    from tether import _exit
    from tether.activities import Catalog
    from tether.storage._urls import sqlite_url

    (tmp_path / "data").mkdir()
    Catalog.open(sqlite_url(tmp_path / "data" / "catalog.db")).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable, "-m", "tether", "worker", str(tmp_path / "data"),
                "--families", "tether.families.sim.adapter:worker_families",
                "--sse-port", str(port),
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == _exit.UNAVAILABLE, done.stderr
    assert f"tether worker: sse_unavailable: cannot serve the AG-UI stream on 127.0.0.1:{port}" in (
        done.stderr
    )
    assert "tether worker ready" not in done.stderr  # never said ready before the refusal
    # `tether demo` says it as `tether serve` and `tether worker` do: the code once, what
    # was to be served, the cause; its JSON names the refusal's class, not "OSError".
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "tether", "demo", "--data-dir", str(tmp_path / "demo")]
        argv += ["--moves", "0", "--port", str(port), "--json"]
        demo = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert demo.returncode == _exit.UNAVAILABLE, demo.stderr
    doc = json.loads(demo.stdout)
    assert doc["code"] == "sse_unavailable" and doc["error"] != "OSError", doc
    assert doc["message"].startswith("cannot serve the AG-UI stream on 127.0.0.1:"), doc
    assert demo.stderr.count("sse_unavailable") == 1, demo.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--data-dir", "", "--moves", "0"],
        ["worker", "", "--families", "tether.families.sim.adapter:worker_families"],
        ["db", "prune", "--data-dir", "", "--older-than", "1d"],
    ],
    ids=["demo", "worker", "db_prune"],
)
def test_an_empty_data_dir_is_refused_not_the_working_directory(
    argv: list[str], tmp_path: Path
) -> None:
    """An empty data dir (an unset shell variable) was the current directory: catalog.db,
    world.db, host.toml and serve.lock were written into it. It is a usage error."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "empty" in done.stderr and "usage" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_demo_names_the_bounds_of_its_memory_cap() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "demo", "--memory-cap-mb", "2000000000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--memory-cap-mb must be 65..1073741824, got 2000000000" in done.stderr


def test_a_demo_lease_past_the_catalogs_bound_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """`--lease-ms` past a week was refused only once the stream served and host.toml was
    written, naming that file (`bad_lease: DIR/host.toml: serve.lease_ms`)."""
    done = subprocess.run(
        [
            sys.executable, "-m", "tether", "demo", "--data-dir", str(tmp_path / "d"),
            "--moves", "0", "--lease-ms", "604800001",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--lease-ms must be 100..604800000, got 604800001" in done.stderr
    assert "AG-UI stream" not in done.stdout + done.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("ms", "said"),
    [
        (8_200, "8.2 s"),
        (59_999, "59.9 s"),
        (733_000, "12 min 13 s"),  # was "733.0 s"
        (11_520_000, "3 h 12 min"),
        (183_600_000, "2 d 3 h"),
        (None, "-"),
        (float("nan"), "-"),
    ],
)
def test_an_age_is_said_in_the_units_a_person_reads(ms: object, said: str) -> None:
    from tether._args import duration

    assert duration(ms) == said
