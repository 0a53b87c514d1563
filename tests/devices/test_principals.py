"""Planner tokens are principals like operators: `[planners.NAME]` with a hashed token and a
role, one rate-limited lookup over every principal (`Authenticator.authenticate(secret,
roles=...)`), what each role may do, and `tether operator hash --role planner`."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import argon2
import pytest
from tether.devices import credentials
from tether.devices.config import load_config, parse_config
from tether.devices.credentials import CredentialError, roles_for
from tether.errors import HostConfigError

from tests._secrets import OBSERVER, OPERATOR, PLANNER

FAST = credentials.MINIMUM
OP_HASH = credentials.hash_secret(OPERATOR, FAST)
PLANNER_HASH = credentials.hash_secret(PLANNER, FAST)
OBSERVER_HASH = credentials.hash_secret(OBSERVER, FAST)


def host_toml(state_dir: Path, *, planners: str = "", operators: str = "") -> str:
    return (
        f'[host]\nstate_dir = "{state_dir}"\n'
        + (operators or f'[operators.ann]\ncredential = "{OP_HASH}"\nrole = "operator"\n')
        + planners
    )


def planner(name: str, token: str, role: str | None = "planner") -> str:
    body = f'[planners.{name}]\ntoken = "{token}"\n'
    return body + (f'role = "{role}"\n' if role is not None else "")


BOTH = planner("ci", PLANNER_HASH) + planner("dash", OBSERVER_HASH, "observer")
TINY = "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHRzYWx0$" + "aGFzaA" * 7


def test_each_role_may_do_what_the_readme_says() -> None:
    assert credentials.PERMISSIONS == {
        "operator": {"decide", "resume", "reboot", "stop", "read"},
        "planner": {"submit", "watch", "stop", "read"},
        "observer": {"read"},
    }
    assert roles_for("read") == ("operator", "observer", "planner")
    assert roles_for("stop") == ("operator", "planner") and roles_for("decide") == ("operator",)
    with pytest.raises(ValueError):
        roles_for("delete")


def test_one_lookup_finds_operators_and_planners_with_their_roles(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=BOTH))
    auth = cfg.authenticator()
    found = auth.authenticate(PLANNER, roles=roles_for("submit"))
    assert (found.name, found.role, found.table, found.where) == (
        "ci",
        "planner",
        "planners",
        "planners.ci",
    )
    assert auth.authenticate(OPERATOR, roles=roles_for("resume")).name == "ann"
    assert auth.authenticate(OBSERVER, roles=roles_for("read")).name == "dash"
    assert sorted(auth.principals) == ["ann", "ci", "dash"]
    assert PLANNER_HASH not in repr(found)  # a principal's repr leaves its hash out
    # The old operator-only call still works: `observer` means any role (all read).
    assert cfg.authenticate(PLANNER, role="observer") == "ci"


@pytest.mark.parametrize(
    ("secret", "action", "role"),
    [
        (PLANNER, "decide", "planner"),  # a planner may not decide for an operator
        (PLANNER, "reboot", "planner"),
        (OPERATOR, "submit", "operator"),  # an operator's credential is not a planner token
        (OBSERVER, "stop", "observer"),  # an observer only reads
    ],
)
def test_a_role_without_the_right_is_refused(
    tmp_path: Path, secret: str, action: str, role: str
) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=BOTH))
    with pytest.raises(CredentialError) as info:
        cfg.authenticator().authenticate(secret, roles=roles_for(action))
    assert info.value.code == "role_refused"
    assert info.value.details["role"] == role
    assert secret not in str(info.value)


@pytest.mark.parametrize(
    ("table", "code"),
    [
        (planner("ci", PLANNER), "plain_credential"),  # the token itself, not its hash
        (planner("ci", argon2.PasswordHasher(time_cost=1).hash(PLANNER)), "weak_credential"),
        (planner("ci", TINY), "weak_credential"),  # tiny costs are checked, never used
        (planner("ci", argon2.PasswordHasher(type=argon2.Type.I).hash(PLANNER)), "weak_credential"),
        (planner("ci", "scrypt$16384$8$1$c2FsdA==$ZGlnZXN0"), "old_credential_format"),
        (planner("ci", PLANNER_HASH, "operator"), "bad_role"),  # operators live in [operators]
        (planner("ci", PLANNER_HASH, "root"), "bad_role"),
        (planner("ann", PLANNER_HASH), "duplicate_principal"),  # one name, one principal
        ('[planners.ci]\ncredential = "x"\n', "unknown_key"),
        ('[planners.ci]\nrole = "planner"\n', "missing_key"),
    ],
)  # fmt: skip
def test_a_plain_weak_or_misplaced_planner_token_is_refused_at_load(
    tmp_path: Path, table: str, code: str
) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_config(host_toml(tmp_path, planners=table))
    assert info.value.code == code
    assert "\n" not in str(info.value) and PLANNER not in str(info.value)


def test_an_operator_may_not_hold_the_planner_role(tmp_path: Path) -> None:
    ops = f'[operators.ann]\ncredential = "{OP_HASH}"\nrole = "planner"\n'
    with pytest.raises(HostConfigError) as info:
        parse_config(host_toml(tmp_path, operators=ops))
    assert info.value.code == "bad_role"


def test_a_planner_table_without_a_role_is_a_planner(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=planner("ci", PLANNER_HASH, None)))
    assert cfg.planners["ci"].role == "planner"


def test_failed_attempts_at_any_principal_share_one_rate_limit(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=planner("ci", PLANNER_HASH)))
    auth = cfg.authenticator()
    for _ in range(credentials.RATE_LIMIT):
        with pytest.raises(CredentialError) as info:
            auth.authenticate("not-a-token-at-all", roles=roles_for("stop"))
        assert info.value.code == "credential_refused"
    for secret, action in ((PLANNER, "stop"), (OPERATOR, "decide")):
        with pytest.raises(CredentialError) as info:
            cfg.authenticator().authenticate(secret, roles=roles_for(action))
        assert info.value.code == "credential_rate_limited"
        assert info.value.details["retry_after_s"] > 0


def test_a_network_peer_guessing_tokens_locks_out_its_own_address_only(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=planner("ci", PLANNER_HASH)))
    auth = cfg.authenticator()
    for _ in range(credentials.RATE_LIMIT):
        with pytest.raises(CredentialError):
            auth.authenticate("guess", roles=roles_for("read"), source="net:192.0.2.9")
    with pytest.raises(CredentialError) as info:  # that address, even with the right token
        auth.authenticate(PLANNER, roles=roles_for("read"), source="net:192.0.2.9")
    assert info.value.code == "credential_rate_limited"
    # Another address, and the local operator, are not locked out by it.
    assert auth.authenticate(PLANNER, roles=roles_for("read"), source="net:192.0.2.10").name == "ci"
    assert cfg.authenticator().authenticate(OPERATOR, roles=roles_for("decide")).name == "ann"


def test_the_rate_limit_file_of_an_earlier_version_is_read_as_local(tmp_path: Path) -> None:
    import json as _json
    import time as _time

    cfg = parse_config(host_toml(tmp_path, planners=planner("ci", PLANNER_HASH)))
    limiter = cfg.authenticator().limiter
    assert limiter is not None
    limiter.path.parent.mkdir(parents=True, exist_ok=True)
    limiter.path.write_text(_json.dumps([_time.time()] * credentials.RATE_LIMIT))
    with pytest.raises(CredentialError) as info:
        cfg.authenticator().authenticate(OPERATOR, roles=roles_for("decide"))
    assert info.value.code == "credential_rate_limited"


def test_no_secret_is_refused_without_counting_a_failure(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path, planners=planner("ci", PLANNER_HASH)))
    for _ in range(credentials.RATE_LIMIT + 1):
        with pytest.raises(CredentialError) as info:
            cfg.authenticator().authenticate(None, roles=roles_for("read"))
        assert info.value.code == "credential_refused"
    assert cfg.authenticator().authenticate(PLANNER, roles=roles_for("read")).name == "ci"


def test_an_unknown_role_asked_for_is_a_programming_error(tmp_path: Path) -> None:
    cfg = parse_config(host_toml(tmp_path))
    with pytest.raises(ValueError):
        cfg.authenticator().authenticate(OPERATOR, roles=("root",))
    with pytest.raises(ValueError):
        cfg.authenticator().authenticate(OPERATOR, roles=())


def test_hash_prints_a_planners_table_that_loads_and_never_the_token(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "tether", "operator", "hash", "--name", "ci", "--role", "planner"]
    done = subprocess.run(argv, input=PLANNER + "\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[planners.ci]" and lines[1].startswith('token = "$argon2id$')
    assert lines[2] == 'role = "planner"'
    cfg = parse_config(host_toml(tmp_path, planners=done.stdout))
    assert cfg.authenticator().authenticate(PLANNER, roles=roles_for("submit")).name == "ci"
    json_argv = [*argv[:4], "--json", *argv[4:]]  # tether operator --json hash ...
    as_json = subprocess.run(json_argv, input=PLANNER + "\n", capture_output=True, text=True)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["role"] == "planner" and doc["credential"].startswith("$argon2id$")
    assert PLANNER not in done.stdout + done.stderr + as_json.stdout + as_json.stderr


def test_the_table_of_an_odd_name_is_still_toml() -> None:
    text = credentials.principal_table("ci bot", "planner", PLANNER_HASH)
    assert tomllib.loads(text)["planners"]["ci bot"] == {"token": PLANNER_HASH, "role": "planner"}
    text = credentials.principal_table("eve", "observer", OBSERVER_HASH)
    assert tomllib.loads(text)["operators"]["eve"]["role"] == "observer"


def test_the_readme_role_table_is_the_permissions_table() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("### Principals and listeners", 1)[1].split("\n- **Verified", 1)[0]
    rows = [line for line in section.splitlines() if line.strip().startswith("| `")]
    documented = {row.split("`")[1]: row.split("|")[2] for row in rows}
    assert sorted(documented) == sorted(credentials.ROLES)
    for role, may in credentials.PERMISSIONS.items():
        for action in may:
            assert action in documented[role], (role, action)


def test_hash_refuses_a_short_planner_token_and_prints_no_table() -> None:
    """Its refusal is its line on stderr and nothing on stdout, even off a terminal, where the
    other commands print JSON: `hash`'s stdout is appended to host.toml, and a JSON line there
    made the file no TOML at all (every command then refused it, `tether stop` too)."""
    argv = [sys.executable, "-m", "tether", "operator", "hash", "--name", "ci", "--role", "planner"]
    done = subprocess.run(argv, input="abc\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "", done.stdout
    for wrong, code in ((["--name", "ci"], "empty_credential"), (["--nme", "x"], "usage")):
        bad = [*argv[:5], *wrong]
        refused = subprocess.run(bad, input="\n", capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and refused.stdout == "", refused
        assert f": {code}: " in refused.stderr, refused.stderr
    as_json = subprocess.run([*argv, "--json"], input="abc\n", capture_output=True, text=True)
    assert json.loads(as_json.stdout)["code"] == "short_token"  # asked for
    assert done.stderr.strip().startswith("tether operator: short_token: ")
    # An operator's passphrase is a person's: 8 characters at least (it re-issues moves).
    person = [*argv[:-2], "--role", "operator"]
    kept = subprocess.run(person, input="s3cret-p\n", capture_output=True, text=True, timeout=60)
    assert kept.returncode == 0 and kept.stdout.startswith("[operators.ci]")
    short = subprocess.run(person, input="s3cret\n", capture_output=True, text=True, timeout=60)
    assert short.returncode == 2 and short.stdout == "", short
    assert short.stderr.startswith("tether operator: short_passphrase: "), short.stderr


@pytest.mark.parametrize("name", ["", " olga", "a/b", "olga\nstopped"])
def test_a_principal_name_that_names_nobody_is_refused(name: str, tmp_path: Path) -> None:
    """An empty name was accepted (`resumed_by: ""` named nobody); one with '/' makes an
    operator's `PRINCIPAL/ID` ambiguous, a newline forges a line of a report."""
    argv = [sys.executable, "-m", "tether", "operator", "hash", "--name", name]
    done = subprocess.run(argv, input="s3cret-pass\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bad_name" in done.stderr and "[operators" not in done.stdout
    hashed = credentials.hash_secret("s3cret-pass")
    config = tmp_path / "host.toml"
    config.write_text(f'[operators.{json.dumps(name)}]\ncredential = "{hashed}"\n')
    with pytest.raises(HostConfigError) as info:
        load_config(config)
    assert info.value.code == "bad_name"
