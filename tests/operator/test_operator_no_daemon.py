"""With no `tether serve` running, `tether operator resolve|resume|reboot` verify no credential
in the CLI: each says in one line that the daemon must run for the state dir (exit 7,
`daemon_not_running`) and changes nothing; `list` and `show` still read the data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether.activities import Catalog, Evidence
from tether.devices import credentials
from tether.devices.latch import StopLatch
from tether.runtime import ArtifactStore

from tests.activities.support import ManualClock, key, reconciling

SECRET = "operator secret for the no-daemon test"
KIND = "physical_ai.robot_move.absolute"
ROBOT = (
    '[ports.p]\nurl = "/dev/null"\n[robots.arm]\nport = "p"\n'
    '[[robots.arm.joints]]\nname = "a"\nid = 1\nmin = -1\nmax = 1\n'
)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host.toml with an operator and a robot, and one Activity parked in its moves data
    dir (revision 1)."""
    state = tmp_path / "state"
    path = tmp_path / "host.toml"
    hashed = credentials.hash_secret(SECRET)
    path.write_text(
        f'[host]\nstate_dir = "{state}"\n[operators.ann]\ncredential = "{hashed}"\n' + ROBOT
    )
    data = state / "moves"
    data.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    clock = ManualClock()
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"), clock=clock)
    try:
        k = key("m1", world="local", kind=KIND)
        _, claim = reconciling(catalog, clock, k)
        doc = ArtifactStore(data / "artifacts").put_bytes(b'{"reason": "test"}', "application/json")
        catalog.record_unknown(k, claim.fence, Evidence(doc.ref, doc.digest), 60_000)
    finally:
        catalog.close()
    return path


def operator(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.run(
        [sys.executable, "-m", "tether", "operator", *argv, "--credential-stdin"],
        input=f"{SECRET}\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def parked(host: Path) -> tuple[bool, int, object]:
    catalog = Catalog.open("sqlite:///" + str(host.parent / "state" / "moves" / "catalog.db"))
    try:
        record = catalog.get(key("m1", world="local", kind=KIND))
    finally:
        catalog.close()
    assert record is not None
    return record.awaiting_decision, record.evidence_revision, record.decision


def refused_without_a_daemon(done: subprocess.CompletedProcess[str], where: str) -> None:
    assert done.returncode == 7, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "daemon_not_running" in line and "tether serve" in line and where in line
    # Off a terminal `tether operator` speaks JSON: the refusal is also its one document.
    (doc,) = [json.loads(x) for x in done.stdout.splitlines()]
    assert (doc["status"], doc["code"]) == ("refused", "daemon_not_running"), doc
    assert SECRET not in done.stderr + done.stdout


@pytest.mark.parametrize("decision", ["abandon", "reissue", "done"])
def test_resolve_with_a_valid_credential_is_refused_and_decides_nothing(
    host: Path, decision: str
) -> None:
    before = parked(host)
    assert before[:2] == (True, 1) and before[2] is None
    resolve = ["resolve", f"local/{KIND}/m1", "--decision", decision, "--revision", "1"]
    done = operator("--config", str(host), "--json", *resolve)
    refused_without_a_daemon(done, f"state dir {host.parent / 'state'}")
    by_data_dir = operator("--data-dir", str(host.parent / "state" / "moves"), *resolve)
    refused_without_a_daemon(by_data_dir, "data dir")
    assert parked(host) == before


def test_resume_and_reboot_are_refused_and_the_latch_stays(host: Path) -> None:
    state = host.parent / "state"
    StopLatch(state).latch("arm")
    resume = operator("--config", str(host), "resume", "arm")
    refused_without_a_daemon(resume, f"state dir {state}")
    assert StopLatch(state).latched("arm")
    reboot = operator("--config", str(host), "reboot", "arm", "--arm-supported")
    refused_without_a_daemon(reboot, f"state dir {state}")
    unknown = operator("--config", str(host), "resume", "amr")  # usage first: nothing to ask
    assert unknown.returncode == 2 and "did you mean 'arm'?" in unknown.stderr


def test_list_and_show_stay_standalone_and_read_only(host: Path) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "--config", str(host), "--json", "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert [i["key"] for i in json.loads(listed.stdout)] == [f"local/{KIND}/m1"]
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "--config", str(host), "--json", "show",
         f"local/{KIND}/m1"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0 and json.loads(shown.stdout)["revision"] == 1
    # The common flags may follow the command too, as a user types them.
    after = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "list", "--json", "--config", str(host)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert after.returncode == 0, after.stderr
    assert [i["key"] for i in json.loads(after.stdout)] == [f"local/{KIND}/m1"]


def test_list_and_show_read_the_configured_postgres_catalog(tmp_path: Path, pg_url: str) -> None:
    """A host whose `[serve] catalog` is PostgreSQL: with no daemon, `list` and `show` read
    that catalog (and its evidence from the hosts' shared payloads), never an empty
    `catalog.db` made in the data dir, which would show nothing parked."""
    from tether.runtime._artifacts import shared_for

    state = tmp_path / "state"
    path = tmp_path / "host.toml"
    path.write_text(f'[host]\nstate_dir = "{state}"\n' + ROBOT + f'[serve]\ncatalog = "{pg_url}"\n')
    state.mkdir(mode=0o700)
    clock = ManualClock()
    catalog = Catalog.open(pg_url, clock=clock)
    shared = shared_for(pg_url)
    try:
        k = key("m1", world="local", kind=KIND)
        _, claim = reconciling(catalog, clock, k)
        # Written by another host: over the inline bound, so only in the shared table.
        evidence = json.dumps({"reason": "power loss", "pad": "x" * 600}).encode()
        doc = ArtifactStore(tmp_path / "elsewhere", shared=shared).put_bytes(
            evidence, "application/json"
        )
        catalog.record_unknown(k, claim.fence, Evidence(doc.ref, doc.digest), 60_000)
    finally:
        catalog.close()
        assert shared is not None
        shared.close()
    run = [sys.executable, "-m", "tether", "operator", "--config", str(path), "--json"]
    listed = subprocess.run([*run, "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [i["key"] for i in json.loads(listed.stdout)] == [f"local/{KIND}/m1"]
    shown = subprocess.run(
        [*run, "show", f"local/{KIND}/m1"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert "power loss" in shown.stdout
    assert not (state / "moves" / "catalog.db").exists()


def test_list_and_show_never_make_the_sqlite_catalog_a_url_names(host: Path) -> None:
    """`[serve] catalog` names a SQLite file no daemon made yet (or a mistyped one): `list`
    made an empty catalog there and said nothing was parked."""
    missing = host.parent / "elsewhere" / "c22.db"
    missing.parent.mkdir()
    text = host.read_text() + f'[serve]\ncatalog = "sqlite://{missing}"\n'
    host.write_text(text)
    argv = [sys.executable, "-m", "tether", "operator", "--config", str(host), "--json"]
    listed = subprocess.run([*argv, "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    shown = subprocess.run(
        [*argv, "show", f"local/{KIND}/m1"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 1, (shown.stdout, shown.stderr)
    assert f"there is no catalog at {missing}" in json.loads(shown.stdout)["message"]
    assert not missing.exists() and list(missing.parent.iterdir()) == []
