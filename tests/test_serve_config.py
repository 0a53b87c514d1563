"""The `[serve]` table: strict keys, documented defaults, loopback-only stream."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from tether._config import HostConfigError
from tether.serve.config import DEFAULT_SSE, ROBOT_MOVE, SIM, data_dir_for, parse_serve, parse_sse

STATE = Path("/srv/tether-state")


def test_defaults_serve_robot_moves_on_the_data_dir_tether_move_uses() -> None:
    serve = parse_serve(None, state_dir=STATE, robots=3)
    assert serve.data_dir == STATE / "moves"
    assert serve.workers == 3 and serve.lease_ms == 30_000 and serve.settle_timeout_s == 30.0
    assert serve.families == (ROBOT_MOVE,)
    assert serve.sse == ("127.0.0.1", 0) and DEFAULT_SSE == "127.0.0.1:0"
    assert parse_serve({}, state_dir=STATE, robots=1).workers == 2


def test_every_key_is_read() -> None:
    raw = {
        "data_dir": "/d",
        "workers": 4,
        "sse": "off",
        "families": [ROBOT_MOVE, SIM],
        "lease_ms": 500,
        "settle_timeout_s": 2,
    }
    serve = parse_serve(raw, state_dir=STATE, robots=1)
    assert (serve.data_dir, serve.workers, serve.sse) == (Path("/d"), 4, None)
    assert serve.families == (ROBOT_MOVE, SIM) and serve.lease_ms == 500


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ({"worker": 2}, "unknown_key"),
        ({"sse": "127.0.0.1"}, "bad_sse"),
        ({"sse": "127.0.0.1:99999"}, "bad_sse"),
        ({"workers": -1}, "bad_workers"),
        ({"workers": True}, "wrong_type"),
        ({"families": ["no-colon"]}, "bad_families"),
        # Listed twice, each kind was served by two families (exit 1, `FamilyError`).
        ({"families": [ROBOT_MOVE, ROBOT_MOVE]}, "bad_families"),
        ({"workers": 65}, "bad_workers"),
        # int() reads these as port 80.
        ({"sse": "127.0.0.1: 80"}, "bad_sse"),
        ({"sse": "127.0.0.1:8_0"}, "bad_sse"),
        # localhost is the loopback address: one port, one socket.
        ({"sse": "127.0.0.1:18765", "console": "localhost:18765"}, "bad_console"),
        ({"host_name": "  "}, "bad_host_name"),
        # The state dir's own lock and the data dir's were one file: the daemon refused
        # itself as `daemon_running`, naming its own pid.
        ({"data_dir": str(STATE)}, "bad_data_dir"),
        ({"host_name": " arm-host-1"}, "bad_host_name"),
        ({"lease_ms": 0}, "bad_lease"),
        ({"settle_timeout_s": 0}, "bad_settle_timeout"),
        # An empty store URL (a template's unset variable) is never the data dir's own file.
        ({"catalog": ""}, "bad_store_url"),
        ({"world": "  "}, "bad_store_url"),
        ({"catalog": "postgresql://db/t", "world": ""}, "bad_store_url"),
        ({"data_dir": ""}, "empty_value"),  # never the current directory
    ],
)
def test_a_bad_setting_is_a_coded_error(raw: dict[str, object], code: str) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_serve(raw, state_dir=STATE, robots=1)
    assert info.value.code == code
    if code == "unknown_key":
        assert info.value.details["suggestion"] == "workers"


@pytest.mark.parametrize(
    ("raw", "code", "named"),
    [
        ({"sse": "127.0.0.1:47123", "grpc": "127.0.0.1:47123"}, "bad_grpc", "serve.sse"),
        ({"console": "127.0.0.1:47124", "live": "127.0.0.1:47124"}, "bad_live", "serve.console"),
        ({"sse": "127.0.0.1:47125", "console": "0.0.0.0:47125"}, "bad_console", "serve.sse"),
    ],
)
def test_two_listeners_on_one_port_are_refused_naming_both(
    raw: dict[str, object], code: str, named: str
) -> None:
    """The second listener could never bind: refused with the configuration, naming both,
    never grpcio's or the socket's own words at start."""
    with pytest.raises(HostConfigError) as info:
        parse_serve({**raw, "families": [SIM]}, state_dir=STATE, robots=0)
    assert info.value.code == code and named in info.value.message, info.value


def test_listeners_apart_or_on_any_free_port_are_accepted() -> None:
    apart = {"sse": "127.0.0.1:0", "grpc": "127.0.0.1:0", "live": "127.0.0.1:0"}
    parse_serve({**apart, "families": [SIM]}, state_dir=STATE, robots=0)
    hosts = {"sse": "127.0.0.1:47126", "grpc": "127.0.0.2:47126"}  # two loopback addresses
    parse_serve({**hosts, "families": [SIM]}, state_dir=STATE, robots=0)
    families = {"sse": "[::1]:47127", "console": "0.0.0.0:47127"}  # IPv6 beside every IPv4
    parse_serve({**families, "families": [SIM]}, state_dir=STATE, robots=0)


def test_no_robot_and_no_family_is_refused() -> None:
    with pytest.raises(HostConfigError) as info:
        parse_serve({}, state_dir=STATE, robots=0)
    assert info.value.code == "bad_families"
    assert parse_serve({"families": [SIM]}, state_dir=STATE, robots=0).families == (SIM,)


def test_loopback_forms() -> None:
    assert parse_sse("localhost:8765") == ("localhost", 8765)
    assert parse_sse("[::1]:8765") == ("::1", 8765)


def test_the_standalone_commands_use_the_daemons_data_dir(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[serve]\ndata_dir = "/var/lib/tether/moves"\n')
    config = SimpleNamespace(path=path, state_dir=tmp_path / "state")
    assert data_dir_for(config) == Path("/var/lib/tether/moves")
    path.write_text("")
    assert data_dir_for(config) == tmp_path / "state" / "moves"
    path.write_text("[serve]\ndata_dri = 1\n")
    with pytest.raises(HostConfigError):
        data_dir_for(config)


def test_status_reads_the_config_as_strictly_as_the_daemon(tmp_path: Path) -> None:
    """`tether status` refuses a misspelled `[serve]` key (exit 2) before asking any daemon."""
    import subprocess
    import sys

    config = tmp_path / "host.toml"
    config.write_text(f'[host]\nstate_dir = "{tmp_path / "state"}"\n[serve]\nworkerz = 2\n')
    done = subprocess.run(
        [sys.executable, "-m", "tether", "status", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "unknown_key" in done.stderr and "did you mean `workers`?" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["serve", "worker"])
@pytest.mark.parametrize("flag", ["--catalog", "--world"])
def test_an_empty_store_flag_is_a_usage_error(tmp_path: Path, command: str, flag: str) -> None:
    """`--catalog ""` (an unset shell variable) is refused, exit 2, never read as absent."""
    import subprocess
    import sys

    config = tmp_path / "host.toml"
    config.write_text(f'[serve]\ndata_dir = "{tmp_path / "data"}"\nfamilies = ["x:y"]\n')
    argv = ["serve", "--config", str(config)] if command == "serve" else ["worker", str(tmp_path)]
    argv += ["--families", "x:y"] if command == "worker" else []
    run = subprocess.run(
        [sys.executable, "-m", "tether", *argv, flag, ""],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert f"{flag} is empty" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "catalog.db").exists()


def test_a_moves_follower_reads_the_daemons_lease_and_settle_timeout(tmp_path: Path) -> None:
    """`tether move` through a daemon follows a move as long as the daemon's own `[serve]`
    lease and settle timeout allow (never its own flags' or defaults')."""
    from tether.serve.config import load_serve

    path = tmp_path / "host.toml"
    path.write_text("[serve]\nlease_ms = 9000\nsettle_timeout_s = 120.0\n")
    served = load_serve(path, state_dir=tmp_path, robots=1)
    assert (served.lease_ms, served.settle_timeout_s) == (9000, 120.0)
    path.write_text("[host]\n")
    served = load_serve(path, state_dir=tmp_path, robots=1)
    assert (served.lease_ms, served.settle_timeout_s) == (30_000, 30.0)


def test_an_empty_catalog_flag_of_db_prune_is_the_same_usage_error() -> None:
    """`tether db prune --catalog ""` says what `serve` and `worker` say of it (code `usage`)."""
    import json
    import subprocess
    import sys

    argv = ["db", "prune", "--catalog", "", "--older-than", "1d", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert json.loads(run.stdout)["code"] == "usage"
    assert "--catalog is empty" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "argv", [["serve", "--catalog", ""], ["serve", "--bogus"], ["host", "--bogus"]]
)
def test_a_usage_error_off_a_terminal_is_a_json_document_on_stdout(
    tmp_path: Path, argv: list[str]
) -> None:
    """A command whose output is JSON off a terminal says its usage errors so too (before,
    stdout stayed empty for these while every other refusal was a document)."""
    import json
    import subprocess
    import sys

    config = tmp_path / "host.toml"
    config.write_text(f'[host]\nstate_dir = "{tmp_path / "state"}"\n')
    run = subprocess.run(
        [sys.executable, "-m", "tether", *argv[:1], "--config", str(config), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    doc = json.loads(run.stdout)
    assert (doc["status"], doc["code"]) == ("refused", "usage"), doc
