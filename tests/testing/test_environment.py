"""`tether.testing`: its docstring and README examples run; the environment and clock behave."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest
import tether.testing
from tether.activities import ActivityKey, Evidence, Now
from tether.runtime import (
    ActivityRequest,
    ActivityRuntimeError,
    AttemptContext,
    Family,
    StagedResult,
    Unknown,
)
from tether.testing import START_MS, ActivityEnvironment, FakeClock
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_package_docstring_example_runs() -> None:
    outcome = doctest.testmod(tether.testing, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted >= 10 and outcome.failed == 0


def test_the_readme_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Testing a family or an adapter (`tether.testing`)", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n### ", 1)[0], re.S)
    assert len(blocks) == 1 and "ActivityEnvironment" in blocks[0]
    exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme_example"})


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    assert clock() == clock.now_ms == clock.boot_ms == START_MS
    clock.advance(1500)
    assert clock() == clock.boot_ms == START_MS + 1500
    clock.step(-3_600_000)  # a wall-clock step back: the lease clock does not move
    assert clock() == START_MS + 1500 - 3_600_000
    assert clock.now() == Now("fake-boot-1", START_MS + 1500, START_MS + 1500 - 3_600_000)
    clock.reboot(7)
    assert clock.now().boot_id == "fake-boot-2" and clock.boot_ms == 7
    with pytest.raises(ActivityRuntimeError):
        clock.advance(-1)  # advance never goes back
    with pytest.raises(ActivityRuntimeError):
        clock.step(-(10**12))  # below zero
    with pytest.raises(ActivityRuntimeError):
        FakeClock(-5)
    assert clock() == START_MS + 1500 - 3_600_000  # refused moves changed nothing


def _project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [ActivityRequest("t.blind", e, v) for e, v in snapshot.changed("t.intent")]


def _stage(staged: StagedResult) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, "t.observed", {"failed": staged.result.failed})]


class _Blind:
    """Executes, then can never tell what happened: every reconcile is Unknown for 60 s."""

    def __init__(self) -> None:
        self.executed = 0

    def execute(self, ctx: AttemptContext, request: dict[str, object]) -> object:
        self.executed += 1
        raise RuntimeError("lost the reply")

    def reconcile(self, ctx: AttemptContext, request: dict[str, object]) -> Unknown:
        note = ctx.artifacts.put_bytes(canonical_json({"op": ctx.operation_id}), "text/plain")
        return Unknown(Evidence(note.ref, note.digest), retry_after_ms=60_000)


def _blind_family(adapter: _Blind) -> Family:
    return Family("blind", ("t.blind",), _project, adapter, _stage)


def test_leases_and_retry_delays_follow_the_fake_clock_only(tmp_path: Path) -> None:
    adapter = _Blind()
    with ActivityEnvironment([_blind_family(adapter)], data_dir=tmp_path) as env:
        env.create_world("w")
        env.commit_tick("w", [ComponentWrite("a", "t.intent", {"n": 1})])
        key = env.key("a")
        rec = env.run_attempt()
        assert rec is not None and rec.key == key and rec.attempt is not None
        assert rec.attempt.may_execute and adapter.executed == 1
        env.clock.advance(env.lease_ms - 1)
        assert env.run_attempt() is None  # one millisecond before the lease runs out
        env.clock.advance(1)
        rec = env.run_attempt()  # reconcile-only: Unknown, parked for an operator
        assert rec is not None and rec.awaiting_decision and adapter.executed == 1
        assert [r.key for r in env.awaiting_decision()] == [key]
        env.clock.advance(59_999)
        assert env.claimable() == []
        env.clock.advance(1)
        assert [r.key for r in env.claimable()] == [key]
        rec = env.run_attempt()
        assert rec is not None and rec.attempt_count == 3 and adapter.executed == 1


def test_wall_clock_steps_move_no_lease_and_a_reboot_expires_them(tmp_path: Path) -> None:
    adapter = _Blind()
    with ActivityEnvironment([_blind_family(adapter)], data_dir=tmp_path) as env:
        env.create_world("w")
        env.commit_tick("w", [ComponentWrite("a", "t.intent", {"n": 1})])
        assert env.run_attempt() is not None
        env.clock.step(env.lease_ms + 1_000)  # the wall clock jumps past the lease
        assert env.run_attempt() is None  # no takeover of the live attempt
        env.clock.step(-3_600_000)  # and an hour back
        env.clock.advance(env.lease_ms)  # the lease runs out on the lease clock
        rec = env.run_attempt()
        assert rec is not None and rec.attempt_count == 2  # reclaimed on time
        assert rec.awaiting_decision  # Unknown: retry in 60 s
        env.commit_tick("w", [ComponentWrite("b", "t.intent", {"n": 2})])
        assert env.run_attempt() is not None and env.run_attempt() is None  # b is leased
        env.clock.reboot()  # b's lease and a's retry delay belonged to the old boot
        again = [env.run_attempt(), env.run_attempt()]
        assert {r.key.activity_id for r in again if r is not None} == {"a", "b"}
        assert all(r is not None and r.lease_boot_id == "fake-boot-2" for r in again)
        assert adapter.executed == 2  # one execution each; after the reboot both reconcile


def test_commit_bare_leaves_the_post_commit_work_owed(tmp_path: Path) -> None:
    with ActivityEnvironment([_blind_family(_Blind())], data_dir=tmp_path) as env:
        env.create_world("w")
        r1 = env.commit_bare("w", [ComponentWrite("a", "t.intent", {"n": 1})])
        assert env.ledger.pending_post_commit("w") == r1
        assert env.get(env.key("a")) is None  # nothing admitted yet
        assert [r.activity_id for r in env.project("w")] == ["a"]  # asks, admits nothing
        assert env.get(env.key("a")) is None
        r2 = env.commit_tick("w")  # finishes r1's work first
        rec = env.get(env.key("a"))
        assert rec is not None and rec.source == r1 and r2.tick == 2


def test_the_temp_dir_is_removed_and_a_given_dir_is_kept(tmp_path: Path) -> None:
    env = ActivityEnvironment()
    made = env.data_dir
    assert (made / "catalog.db").exists()
    env.close()
    env.close()  # idempotent
    assert not made.exists()
    with ActivityEnvironment(data_dir=tmp_path / "kept") as kept:
        kept.create_world("w")
    assert (tmp_path / "kept" / "world.db").exists()
    with ActivityEnvironment(data_dir=tmp_path / "kept") as again:
        assert again.ledger.worlds() == ["w"]  # the same real storage, reopened


def test_the_stores_may_live_at_urls_and_the_data_dir_keeps_only_artifacts(
    tmp_path: Path, pg_url: str
) -> None:
    with ActivityEnvironment(
        [_blind_family(_Blind())], data_dir=tmp_path, catalog_url=pg_url, world_url=pg_url
    ) as env:
        env.create_world("w")
        r1 = env.commit_tick("w", [ComponentWrite("a", "t.intent", {"n": 1})])
        rec = env.get(env.key("a"))
        assert rec is not None and rec.source == r1
    assert not (tmp_path / "catalog.db").exists() and not (tmp_path / "world.db").exists()
    with ActivityEnvironment(data_dir=tmp_path, catalog_url=pg_url, world_url=pg_url) as again:
        assert again.ledger.worlds() == ["w"]  # the same PostgreSQL schema, reopened


def test_key_needs_the_kind_when_it_is_ambiguous() -> None:
    with ActivityEnvironment() as env:
        with pytest.raises(ActivityRuntimeError):
            env.key("a")
        assert env.key("a", kind="k", world_id="v") == ActivityKey("v", "k", "a")
        assert env.run_attempt() is None and env.drain() == 0 and env.observe() == []


def test_a_projection_that_raises_is_a_family_error_saying_the_tick_landed(
    tmp_path: Path,
) -> None:
    """A projection's own exception escaped `commit_tick` raw (a `KeyError`) after its tick
    had committed, so the caller could not tell whether the tick landed, and every later
    commit of the world raised it again as an untyped error."""
    from tether.runtime import FamilyError

    def broken(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        if snapshot.changed("t.intent"):
            raise KeyError("bad")
        return []

    fam = Family("blind", ("t.blind",), broken, _Blind(), _stage)
    with ActivityEnvironment([fam], data_dir=tmp_path) as env:
        env.create_world("w")
        with pytest.raises(FamilyError) as info:
            env.commit_tick("w", [ComponentWrite("job-1", "t.intent", {})])
        assert info.value.code == "projection_failed"
        assert "KeyError" in str(info.value) and "the tick is committed" in str(info.value)
        assert env.head("w").tick == 1  # it did land
        with pytest.raises(FamilyError) as again:  # its post-commit work is still owed
            env.commit_tick("w", [ComponentWrite("x", "other", 1)])
        assert again.value.code == "projection_failed"
