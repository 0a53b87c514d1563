"""Named operators with argon2id credentials: minimum parameters enforced from the hash's own
checked parameters, the old scrypt format refused with what to do, failed attempts
rate-limited across processes, secrets never from argv or the environment, never printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import argon2
import pytest
from tether.devices import credentials
from tether.devices.config import parse_config
from tether.devices.credentials import CredentialError, RateLimiter
from tether.errors import HostConfigError

from tests._serve import add_serve, daemon

SECRET = "correct horse battery staple"
HASH = credentials.hash_secret(SECRET)


def config_text(state_dir: Path, *operators: tuple[str, str, str]) -> str:
    body = f'[host]\nstate_dir = "{state_dir}"\n'
    for name, stored, role in operators:
        body += f'[operators.{name}]\ncredential = "{stored}"\nrole = "{role}"\n'
    return body


def weak(**params: int) -> str:
    cost = {"time_cost": 3, "memory_cost": 65_536, "parallelism": 4, **params}
    return argon2.PasswordHasher(**cost).hash(SECRET)  # type: ignore[arg-type]


def test_a_decision_names_the_operator_the_credential_belongs_to(tmp_path: Path) -> None:
    other = credentials.hash_secret("another secret")
    cfg = parse_config(config_text(tmp_path, ("ann", HASH, "operator"), ("bo", other, "operator")))
    assert cfg.authenticate(SECRET) == "ann" and cfg.authenticate("another secret") == "bo"
    with pytest.raises(CredentialError) as info:
        cfg.authenticate("guess")
    assert info.value.code == "credential_refused"
    with pytest.raises(CredentialError) as info:
        cfg.authenticate(None)
    assert info.value.code == "credential_refused"


def test_a_role_without_the_right_is_refused(tmp_path: Path) -> None:
    cfg = parse_config(config_text(tmp_path, ("eve", HASH, "observer")))
    with pytest.raises(CredentialError) as info:
        cfg.authenticate(SECRET)
    assert info.value.code == "role_refused"
    assert cfg.authenticate(SECRET, role="observer") == "eve"
    with pytest.raises(HostConfigError) as bad:
        parse_config(config_text(tmp_path, ("eve", HASH, "root")))
    assert bad.value.code == "bad_role"


@pytest.mark.parametrize(
    ("stored", "code"),
    [
        (weak(time_cost=1), "weak_credential"),
        (weak(memory_cost=8_192), "weak_credential"),
        (weak(time_cost=40), "excessive_credential_cost"),
        # A hand-made string naming tiny costs is checked, never used with them.
        ("$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHRzYWx0$" + "aGFzaA" * 7, "weak_credential"),
        (argon2.PasswordHasher(type=argon2.Type.I).hash(SECRET), "weak_credential"),
        ("$argon2id$v=19$m=65536,t=3,p=4$!!!", "weak_credential"),
        ("scrypt$16384$8$1$c2FsdA==$ZGlnZXN0", "old_credential_format"),
        ("scrypt$2$1$1$c2FsdA==$ZGlnZXN0", "old_credential_format"),
        ("hunter2", "plain_credential"),
    ],
    # Ids that are the same in every process (a hash made here has a fresh salt): the suite's
    # processes must collect the same tests (pytest-xdist).
    ids=[
        "time_cost_1", "memory_8192", "time_cost_40", "tiny_costs", "argon2i", "bad_salt",
        "scrypt", "scrypt_tiny", "plain",
    ],
)  # fmt: skip
def test_a_weak_or_old_stored_hash_is_refused_at_load(
    tmp_path: Path, stored: str, code: str
) -> None:
    with pytest.raises(HostConfigError) as info:
        parse_config(config_text(tmp_path, ("ann", stored, "operator")))
    assert info.value.code == code
    assert "\n" not in str(info.value)
    if code == "old_credential_format":
        assert "tether operator hash --name NAME" in str(info.value)


def test_the_old_single_operator_table_is_refused_with_what_to_do(tmp_path: Path) -> None:
    text = f'[host]\nstate_dir = "{tmp_path}"\n[operator]\ncredential = "scrypt$16384$8$1$a$b"\n'
    with pytest.raises(HostConfigError) as info:
        parse_config(text)
    assert info.value.code == "old_credential_format"
    assert "[operators.NAME]" in str(info.value)


def test_the_minimum_is_owasps_argon2id_floor() -> None:
    floor = credentials.MINIMUM
    assert (floor.time_cost, floor.memory_cost, floor.parallelism) == (2, 19_456, 1)
    assert credentials.hash_secret("x", credentials.MINIMUM).startswith("$argon2id$v=19$")
    with pytest.raises(CredentialError):
        credentials.hash_secret("x", credentials.Cost(1, 19_456, 1, 32, 16))


def test_failed_attempts_are_rate_limited_across_processes(tmp_path: Path) -> None:
    cfg = parse_config(config_text(tmp_path, ("ann", HASH, "operator")))
    for _ in range(credentials.RATE_LIMIT):
        with pytest.raises(CredentialError):
            cfg.authenticate("guess")
    with pytest.raises(CredentialError) as info:
        cfg.authenticate(SECRET)  # even the right secret, until the window passes
    assert info.value.code == "credential_rate_limited"
    assert info.value.details["retry_after_s"] > 0
    code = (
        "import sys; from tether.devices.config import load_config\n"
        "try:\n    load_config(sys.argv[1]).authenticate(sys.argv[2])\n"
        "except Exception as e:\n    print(e.code)\n"
    )
    path = tmp_path / "host.toml"
    path.write_text(config_text(tmp_path, ("ann", HASH, "operator")))
    other = subprocess.run(
        [sys.executable, "-c", code, str(path), SECRET], capture_output=True, text=True
    )
    assert other.stdout.strip() == "credential_rate_limited"  # another process sees it too
    assert oct((tmp_path / "auth" / "failures.json").stat().st_mode & 0o777) == "0o600"


def test_concurrent_guesses_from_one_source_are_counted_before_more_are_tried(
    tmp_path: Path,
) -> None:
    """40 wrong secrets at once from one address: one source's checks run one at a time, each
    reading and writing its failure count around its own verification, so exactly
    `RATE_LIMIT` are verified before the source is locked out."""
    cfg = parse_config(config_text(tmp_path, ("ann", HASH, "operator")))
    codes: list[str] = []
    start = threading.Barrier(40)

    def guess(i: int) -> None:
        start.wait()
        try:
            cfg.authenticator().authenticate(f"guess-{i}", roles=("operator",), source="net:x")
        except CredentialError as e:
            codes.append(e.code)

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(codes) == 40
    verified = codes.count("credential_refused")
    assert verified == credentials.RATE_LIMIT, codes
    assert codes.count("credential_rate_limited") == 40 - verified


def test_a_source_never_waits_for_another_sources_checks(tmp_path: Path) -> None:
    """While one source's check is under way (held here), another source's right secret, a
    Stop's or the local operator's, is verified at once."""
    cfg = parse_config(config_text(tmp_path, ("ann", HASH, "operator")))
    auth = cfg.authenticator()
    busy = credentials._one_at_a_time("net:10.0.0.9")
    with busy:  # a guess from 10.0.0.9 is being verified
        for source in ("net:10.0.0.9:stop", "local", "net:10.0.0.8"):
            done: list[str] = []
            t = threading.Thread(
                target=lambda s=source, out=done: out.append(
                    auth.authenticate(SECRET, roles=("operator",), source=s).name
                )
            )
            t.start()
            t.join(30)
            assert done == ["ann"], source


def test_a_success_clears_the_failures(tmp_path: Path) -> None:
    limiter = RateLimiter(tmp_path / "failures.json", limit=3)
    limiter.failed()
    limiter.failed()
    limiter.succeeded()
    limiter.failed()
    limiter.failed()
    limiter.check()  # two failures since the success: under the limit


def test_a_credential_of_another_role_never_clears_the_failures(tmp_path: Path) -> None:
    """An observer's own credential, refused for an operator's action (`role_refused`), was
    counted as a success and cleared the source's failures: guesses of an operator's
    credential with it in between were never locked out. Only a success clears them."""
    observer = "an observer's secret 123"
    cfg = parse_config(
        config_text(
            tmp_path,
            ("ann", HASH, "operator"),
            ("bob", credentials.hash_secret(observer), "observer"),
        )
    )
    for _ in range(credentials.RATE_LIMIT - 1):
        with pytest.raises(CredentialError):
            cfg.authenticate("guess")
    with pytest.raises(CredentialError) as info:
        cfg.authenticate(observer)  # the right secret, the wrong role
    assert info.value.code == "role_refused"
    with pytest.raises(CredentialError):
        cfg.authenticate("guess")  # the fifth failure
    with pytest.raises(CredentialError) as info:
        cfg.authenticate(SECRET)
    assert info.value.code == "credential_rate_limited"


def test_a_secret_file_must_be_0600(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o644)
    with pytest.raises(CredentialError) as info:
        credentials.read_secret(file=str(path))
    assert info.value.code == "insecure_secret_file"
    path.chmod(0o600)
    assert credentials.read_secret(file=str(path)) == SECRET
    # A directory was told to `chmod 600` itself; a missing file was an uncoded
    # FileNotFoundError line.
    for wrong, said in ((tmp_path, "is a directory"), (tmp_path / "nope", "cannot be read")):
        with pytest.raises(CredentialError) as info:
            credentials.read_secret(file=str(wrong))
        assert info.value.code == "unreadable_secret_file" and said in info.value.message
        assert "chmod" not in info.value.message


def test_the_cli_takes_no_secret_from_the_environment_and_prints_none(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(config_text(tmp_path / "state", ("ann", HASH, "operator")))
    env = {**os.environ, "TETHER_OPERATOR_CREDENTIAL": SECRET}
    argv = [sys.executable, "-m", "tether", "operator", "--config", str(path), "--json"]
    from_env = subprocess.run(
        [*argv, "resume", "arm"], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    assert from_env.returncode == 2  # no robot arm: a usage error before any credential
    (tmp_path / "host.toml").write_text(
        path.read_text()
        + '[ports.p]\nurl = "/dev/null"\n[robots.arm]\nport = "p"\n'
        + '[[robots.arm.joints]]\nname = "a"\nid = 1\nmin = -1\nmax = 1\n'
    )
    add_serve(path, '\n[serve]\nsse = "off"\n')
    with daemon(path):  # only `tether serve` verifies a credential
        refused = subprocess.run(
            [*argv, "resume", "arm"],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        assert refused.returncode == 1
        # The env is not read: no credential was given (and none is sent).
        assert json.loads(refused.stdout)["code"] == "empty_credential"
        secret_file = tmp_path / "secret"
        secret_file.write_text(SECRET)
        secret_file.chmod(0o600)
        ok = subprocess.run(
            [*argv, "resume", "arm", "--credential-file", str(secret_file)],
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        said = json.loads(ok.stdout)  # the credential was verified as ann's
        assert said["not_latched"] is True and said["asked_by"] == "ann", said
    hashed = subprocess.run(
        [*argv, "hash", "--name", "cy"], input=SECRET + "\n", capture_output=True, text=True
    )
    assert hashed.returncode == 0 and json.loads(hashed.stdout)["name"] == "cy"
    for done in (from_env, refused, ok, hashed):
        assert SECRET not in done.stdout + done.stderr
