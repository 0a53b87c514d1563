"""The generic strict table reader: declared keys only, typed values, the nearest valid key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tether._config import HostConfigError, Table, nearest

KEYS = ("speed", "first_motion_speed", "min", "max", "name", "joints")


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
    done = subprocess.run(
        [sys.executable, "-m", "tether", "status", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "empty_value" in done.stderr, done.stderr
    assert not list(Path.cwd().glob("latches")), "nothing was made in the current directory"
