"""The generic strict table reader: declared keys only, typed values, the nearest valid key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tether._config import HostConfigError, Table, nearest

KEYS = ("speed", "first_motion_speed", "min", "max", "name", "joints")


def _tether(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("word", "meant"),
    [
        ("sped", "speed"),
        ("Speed", "speed"),
        ("speeed", "speed"),
        ("first_motion_sped", "first_motion_speed"),
        ("mx", "max"),
        ("mxa", "max"),
        ("maximum", "max"),
        ("nmae", "name"),
        ("banana", None),
        ("torque", None),
    ],
)
def test_nearest(word: str, meant: str | None) -> None:
    assert nearest(word, KEYS) == meant


def test_a_long_word_is_compared_only_where_its_length_allows_a_close_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request may carry a megabyte-long name: the edit distance (quadratic) runs only
    against candidates whose length is close enough to match; a prefix needs none."""
    import tether._config as config

    compared: list[tuple[int, int]] = []
    real = config._distance

    def counted(a: str, b: str) -> int:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(config, "_distance", counted)
    assert nearest("x" * 300_000, KEYS) is None
    assert nearest("speed" + "x" * 300_000, KEYS) == "speed"  # a prefix, as before
    assert compared == []
    assert nearest("sped", KEYS) == "speed"
    assert compared and all(abs(a - b) <= 1 for a, b in compared)
    assert config.clipped("a" * 64) == "a" * 64
    assert config.clipped("a" * 300_000) == "a" * 64 + "... (300000 characters)"


def test_an_undeclared_key_is_refused_before_any_value_is_read() -> None:
    with pytest.raises(HostConfigError) as info:
        Table({"sped": 0.1, "name": 3}, "robots.arm", KEYS)  # `name` is also mistyped
    assert info.value.code == "unknown_key"
    assert info.value.details == {
        "table": "robots.arm",
        "key": "sped",
        "suggestion": "speed",
        "valid": sorted(KEYS),
    }


def test_values_are_typed_and_defaults_only_fill_absent_keys() -> None:
    table = Table({"speed": 2, "name": "arm", "min": True}, "robots.arm", KEYS)
    assert table.number("speed", 1.5) == 2.0 and table.number("max", 1.5) == 1.5
    assert table.text("name") == "arm" and table.optional_text("joints") is None
    with pytest.raises(HostConfigError) as info:
        table.number("min")  # a bool is never a number
    assert (info.value.code, info.value.details["key"]) == ("wrong_type", "min")
    with pytest.raises(HostConfigError) as info:
        table.text("first_motion_speed")
    assert info.value.code == "missing_key"
    assert str(info.value) == "missing_key: robots.arm: `first_motion_speed` is required"


def test_sub_tables_are_strict_too() -> None:
    top = Table({"host": {"stat_dir": "/x"}}, "", ("host",))
    with pytest.raises(HostConfigError) as info:
        top.table("host", ("state_dir",))
    assert "host: unknown key `stat_dir`; did you mean `state_dir`?" in info.value.message
    with pytest.raises(HostConfigError) as info:
        Table({"robot": {}}, "", ("robots",))
    assert info.value.message.startswith("the top level: unknown key `robot`")
    with pytest.raises(HostConfigError) as info:
        Table([1], "robots.arm.joints[0]", KEYS)
    assert info.value.code == "wrong_type"


def test_reading_an_undeclared_key_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        Table({}, "host", ("state_dir",)).text("stat_dir", "")


def test_an_empty_path_is_refused_never_the_current_directory(tmp_path: Path) -> None:
    """A path set to "" (a template's unset variable) is `empty_value`; absent, its default."""
    assert Table({}, "host", ("state_dir",)).path("state_dir", "/d") == "/d"
    assert Table({"state_dir": "/s"}, "host", ("state_dir",)).path("state_dir", "/d") == "/s"
    with pytest.raises(HostConfigError) as info:
        Table({"state_dir": " "}, "host", ("state_dir",)).path("state_dir", "/d")
    assert info.value.code == "empty_value" and "host: `state_dir` is empty" in info.value.message
    config = tmp_path / "host.toml"
    config.write_text('[host]\nstate_dir = ""\n')
    done = _tether("status", "--config", str(config))
    assert done.returncode == 2 and "empty_value" in done.stderr, done.stderr
    assert not list(Path.cwd().glob("latches")), "nothing was made in the current directory"


def test_relative_state_and_data_dirs_are_taken_from_the_config_file_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop latched from one working directory must hold for a move started from another:
    a relative `state_dir` or `data_dir` is the configuration file's directory's."""
    from tether.devices.config import load_config
    from tether.serve.config import data_dir_for, load_serve

    conf = tmp_path / "conf"
    conf.mkdir()
    path = conf / "host.toml"
    path.write_text(
        '[host]\nstate_dir = "state"\n[serve]\ndata_dir = "../moves"\n'
        'families = ["tether.serve.families:sim_families"]\n'
    )
    seen = set()
    for cwd in (conf, tmp_path, Path("/")):
        monkeypatch.chdir(cwd)
        for given in (path, path.relative_to(cwd) if cwd != Path("/") else path):
            config = load_config(given)
            serve = load_serve(given, state_dir=config.state_dir, robots=0)
            seen.add((config.state_dir, serve.data_dir, data_dir_for(config)))
    assert seen == {(conf / "state", conf / ".." / "moves", conf / ".." / "moves")}


def test_a_relative_port_path_is_taken_from_the_config_file_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`url = "../arm.pty"` named another device from each working directory: `tether stop`
    from `/` (a service's) did not reach the bus it reached from the file's directory. A
    scheme URL stays as given."""
    from tether.devices.config import load_config

    conf = tmp_path / "conf"
    conf.mkdir()
    path = conf / "host.toml"
    robot = '[robots.arm]\nport = "bus"\njoints = [{name = "a", id = 1, min = -1.0, max = 1.0}]\n'
    path.write_text(f'[host]\nstate_dir = "state"\n[ports.bus]\nurl = "../arm.pty"\n{robot}')
    seen = set()
    for cwd in (conf, tmp_path, Path("/")):
        monkeypatch.chdir(cwd)
        seen.add(str(load_config(path).ports["bus"].url))
    assert seen == {str(conf / ".." / "arm.pty")}
    path.write_text(f'[host]\nstate_dir = "state"\n[ports.bus]\nurl = "socket://h:1"\n{robot}')
    assert load_config(path).ports["bus"].url == "socket://h:1"


@pytest.mark.parametrize(
    "setting",
    [
        '[host]\nstate_dir = "$HOME/tether-state"\n',
        '[host]\nstate_dir = "s"\n[serve]\ndata_dir = "${DATA}/moves"\n',
        '[host]\nstate_dir = "s"\n[ports.bus]\nurl = "$PTY"\n'
        '[robots.arm]\nport = "bus"\njoints = [{name = "a", id = 1, min = -1.0, max = 1.0}]\n',
    ],
    ids=["state_dir", "data_dir", "port_url"],
)
def test_a_path_with_a_shell_variable_is_refused_never_a_literal_directory(
    tmp_path: Path, setting: str
) -> None:
    """host.toml expands a leading `~` only: `$HOME/tether-data` made a directory literally
    named `$HOME` beside the file."""
    config = tmp_path / "host.toml"
    config.write_text(setting)
    done = _tether("status", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "unexpanded_variable" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not [p for p in tmp_path.rglob("*") if "$" in p.name]


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe[host]\n", "[host]\n# caf\u00e9\n".encode("latin-1"), "[host]\n".encode("utf-16")],
)
def test_a_config_that_is_not_utf8_is_one_line_naming_the_file(tmp_path: Path, data: bytes) -> None:
    config = tmp_path / "host.toml"
    config.write_bytes(data)
    done = _tether("stop", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "bad_toml" in done.stderr and str(config) in done.stderr and "UTF-8" in done.stderr


def test_a_config_error_names_the_file(tmp_path: Path) -> None:
    from tether.devices.config import load_config
    from tether.serve.config import load_serve

    config = tmp_path / "lab-arm.toml"
    config.write_text('[host]\nstate_dirr = "/x"\n')
    with pytest.raises(HostConfigError) as info:
        load_config(config)
    assert info.value.code == "unknown_key" and info.value.message.startswith(f"{config}: ")
    assert info.value.details["file"] == str(config) and str(info.value).count(str(config)) == 1
    config.write_text("[serve]\nworkerz = 2\n")
    with pytest.raises(HostConfigError) as info:
        load_serve(config, state_dir=tmp_path, robots=0)
    assert info.value.message.startswith(f"{config}: serve: unknown key")


def test_a_home_of_no_user_is_a_config_error_not_a_traceback(tmp_path: Path) -> None:
    from tether.devices.config import load_config

    config = tmp_path / "host.toml"
    config.write_text('[host]\nstate_dir = "~no_such_user_of_tether/state"\n')
    with pytest.raises(HostConfigError) as info:
        load_config(config)
    assert info.value.code == "bad_path" and "~no_such_user_of_tether" in info.value.message


def test_a_shutdown_bound_that_is_no_number_is_said_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether._proc import SHUTDOWN_BOUND_S, shutdown_bound_s

    for bad in ("30s", "0", "-1", "inf", "nan"):
        monkeypatch.setenv("TETHER_SHUTDOWN_BOUND_S", bad)
        assert shutdown_bound_s() == SHUTDOWN_BOUND_S
        assert f"TETHER_SHUTDOWN_BOUND_S={bad!r}" in capsys.readouterr().err
    monkeypatch.setenv("TETHER_SHUTDOWN_BOUND_S", "2.5")
    assert shutdown_bound_s() == 2.5 and capsys.readouterr().err == ""
