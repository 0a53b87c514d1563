"""The console's `[serve]` keys: strict, documented defaults, and refusals by stable code."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether._config import HostConfigError
from tether.console.config import DEFAULT_MAX_EVIDENCE_AGE_S, DEFAULT_SESSION_S
from tether.devices.credentials import hash_secret
from tether.serve.config import parse_serve

STATE = Path("/srv/tether-state")


def test_the_console_is_off_by_default_and_every_key_is_read() -> None:
    off = parse_serve(None, state_dir=STATE, robots=1).console
    assert off.address is None and off.stop_token is None
    assert (off.max_evidence_age_s, off.session_s) == (
        DEFAULT_MAX_EVIDENCE_AGE_S,
        DEFAULT_SESSION_S,
    )
    token = hash_secret("a stop token for the config test")
    raw = {
        "console": "127.0.0.1:8766",
        "console_max_evidence_age_s": 30,
        "console_session_s": 600,
        "console_stop_token": token,
    }
    on = parse_serve(raw, state_dir=STATE, robots=1).console
    assert on.address == ("127.0.0.1", 8766) and on.max_evidence_age_s == 30.0
    assert on.session_s == 600.0 and on.stop_token == token


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ({"consol": "127.0.0.1:1"}, "unknown_key"),
        ({"console": "everywhere"}, "bad_console"),
        ({"console": "127.0.0.1:99999"}, "bad_console"),
        ({"console": 8766}, "wrong_type"),
        ({"console_max_evidence_age_s": 0}, "bad_console"),
        ({"console_max_evidence_age_s": "5"}, "wrong_type"),
        ({"console_session_s": 1}, "bad_console"),
        ({"console_stop_token": "plain text"}, "weak_credential"),
        ({"console_stop_token": "scrypt$2$1$1"}, "old_credential_format"),
    ],
)
def test_a_bad_console_key_is_refused_by_code(raw: dict[str, object], code: str) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_serve(raw, state_dir=STATE, robots=1)
    assert info.value.code == code


def test_a_misspelled_console_key_names_the_nearest() -> None:
    with pytest.raises(HostConfigError) as info:
        parse_serve({"console_max_evidence_age": 5}, state_dir=STATE, robots=1)
    assert "console_max_evidence_age_s" in str(info.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_refusal_of_a_non_finite_number_is_strict_json(tmp_path: Path, value: str) -> None:
    """`--json` refusals are one strict JSON document: the refused value NaN or an infinity,
    which JSON cannot hold, is written as its text, never the bare `NaN` token that strict
    parsers (a browser's `JSON.parse`, `jq`) refuse."""
    import json
    import subprocess
    import sys

    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n'
        f'\n[serve]\nfamilies = ["tether.serve.families:sim_families"]\n'
        f"console_max_evidence_age_s = {value}\n"
    )

    def strict(token: str) -> object:
        raise ValueError(f"not JSON: {token}")

    done = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    doc = json.loads(done.stdout, parse_constant=strict)
    assert doc["code"] == "bad_console", doc
    assert doc["details"]["value"] == str(float(value)), doc
