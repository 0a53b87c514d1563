"""A family's admission check: pure, run by the required projector on each request; a refused
request is admitted already failed (its durable refusal document), never claimed or bound,
and observed and settled by a later tick like any other failed result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hosttools import akey, drain, make_host
from journal_provider import Journal, intents, make_family
from tether.activities import operation_id_for
from tether.runtime import (
    REFUSAL_MEDIA_TYPE,
    ActivityRequest,
    ArtifactStore,
    Family,
    FamilyError,
    Refusal,
    StagedResult,
    refusal_of,
)


def _limit_check(limit: int):  # type: ignore[no-untyped-def]
    """A pure check over plain data: refuse a task whose `n` is at or past `limit`."""

    def check(request: ActivityRequest) -> Refusal | None:
        n = request.input["n"]  # type: ignore[index, call-overload]
        if n < limit:
            return None
        return Refusal("task_too_large", f"task {n} is at or past the limit {limit}", {"n": n})

    return check


def _family(data_dir: Path, limit: int = 1) -> Family:
    return dataclasses.replace(make_family(data_dir), admission_check=_limit_check(limit))


def test_a_refused_request_is_admitted_failed_never_claimed_and_settles(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    with make_host(tmp_path, _family(tmp_path, limit=1)) as host:
        host.create_world("w")
        host.commit_tick("w", intents(3))  # task 0 runs; tasks 1 and 2 are refused
        refused = [host.get(akey(i)) for i in (1, 2)]
        for i, rec in zip((1, 2), refused, strict=True):
            assert rec is not None and rec.refused_at_admission
            assert (rec.attempt_count, rec.operation_id, rec.claimable_from_ms) == (0, None, None)
            assert rec.result is not None and rec.result.media_type == REFUSAL_MEDIA_TYPE
            doc = Refusal.from_document(host.artifacts.get(rec.result))
            assert doc == Refusal("task_too_large", f"task {i} is at or past the limit 1", {"n": i})
        runs = host.get(akey(0))
        assert runs is not None and not runs.refused_at_admission and runs.result is None
        # Replaying the projection of the committed tick changes nothing.
        host.projector.project(host.snapshot("w"))
        assert [host.get(akey(i)) for i in (1, 2)] == refused
        assert drain(host) == 1  # only task 0 is ever claimed
        host.observe_once()
        for i in range(3):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None
        observed = host.snapshot("w").get("task-0001", "task.observed.crash.effect")
        assert observed == {
            "failed": True,
            "media_type": REFUSAL_MEDIA_TYPE,
            "kind": "crash.effect",
        }
        assert host.snapshot("w").get("task-0002", "task.status.crash.effect") == "done"
    # The provider never saw a refused task: no call, no effect under its operation id.
    ops = {op for op, _, _ in journal.calls()} | set(journal.effects())
    assert ops == {operation_id_for(akey(0))}


def test_the_check_must_be_pure_and_return_a_refusal_or_none(tmp_path: Path) -> None:
    base = make_family(tmp_path)
    store = ArtifactStore(tmp_path / "artifacts")

    def reaches_a_store(request: ActivityRequest) -> Refusal | None:
        if store.root.exists():
            return None
        return Refusal("no_store", "the store is gone")

    with pytest.raises(FamilyError, match=r"admission check .* must be pure"):
        dataclasses.replace(base, admission_check=reaches_a_store)
    with pytest.raises(FamilyError, match="bound method"):
        dataclasses.replace(base, admission_check=base.adapter.execute)  # type: ignore[arg-type]

    def says_no(request: ActivityRequest) -> Refusal | None:
        return "no"  # type: ignore[return-value]

    fam = dataclasses.replace(base, admission_check=says_no)
    with pytest.raises(FamilyError, match="not a Refusal"):
        fam.run_admission_check(ActivityRequest("crash.effect", "t", {}))
    assert base.run_admission_check(ActivityRequest("crash.effect", "t", {})) is None


@pytest.mark.parametrize(
    ("code", "reason", "details"),
    [
        ("Too-Large", "why", {}),
        ("", "why", {}),
        ("too_large", "", {}),
        ("too_large", "two\nlines", {}),
        ("too_large", "why", {"x": float("nan")}),
        ("too_large", "why", ["not", "an", "object"]),
    ],
)
def test_a_malformed_refusal_is_a_family_error(code: str, reason: str, details: object) -> None:
    with pytest.raises(FamilyError):
        Refusal(code, reason, details)  # type: ignore[arg-type]


def test_the_refusal_document_round_trips_and_is_a_function_of_the_refusal(
    tmp_path: Path,
) -> None:
    refusal = Refusal("too_large", "why", {"cap": 1, "need": 2})
    assert refusal.document() == b'{"code":"too_large","details":{"cap":1,"need":2},"reason":"why"}'
    assert Refusal.from_document(refusal.document()) == refusal
    with pytest.raises(FamilyError, match="not a refusal document"):
        Refusal.from_document(b"[]")
    ref = ArtifactStore(tmp_path).put_bytes(refusal.document(), REFUSAL_MEDIA_TYPE)
    key = akey(0)
    failed = dataclasses.replace(ref, failed=True)
    assert refusal_of(StagedResult(key, failed, refusal.document())) == refusal
    assert refusal_of(StagedResult(key, ref, refusal.document())) is None  # not failed
    other = dataclasses.replace(failed, media_type="application/json")
    assert refusal_of(StagedResult(key, other, refusal.document())) is None


def test_a_request_the_check_admits_runs_as_before(tmp_path: Path) -> None:
    with make_host(tmp_path, _family(tmp_path, limit=10)) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert drain(host) == 1
        host.observe_once()
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None and not rec.refused_at_admission
