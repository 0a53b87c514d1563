"""A submitted sim reach (`family.submit_intent`): field-by-field checks naming the field, the
intent the projection reads, the memory cap left to admission; and `not_after_ms` honoured at
the start, by the provider and by the episode process itself (no start marker past it)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tether.families.sim import EpisodeRequest, SimProvider
from tether.families.sim.errors import AttemptExpired, InvalidEpisodeRequest, SimReachRefused
from tether.families.sim.family import (
    INTENT,
    KIND,
    admission_check,
    reach_request,
    submit_intent,
)
from tether.families.sim.provider import EXIT_EXPIRED
from tether.runtime import ActivityRequest

BODY: dict[str, Any] = {"seed": 3, "target": [0.2, 0.1], "episodes": 1, "steps": 200}


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("seed", {"seed": -1}),
        ("seed", {"seed": 2**63}),
        ("seed", {"seed": True}),
        ("seed", {"seed": None}),
        ("episodes", {"episodes": 0}),
        ("episodes", {"episodes": 1001}),
        ("steps", {"steps": 0}),
        ("steps", {"steps": 1.5}),
        ("target", {"target": [0.2]}),
        ("target[0]", {"target": [math.inf, 0.1]}),
        ("target[1]", {"target": [0.2, "y"]}),
        # An int past a float's range: `math.isfinite` raised OverflowError (untyped).
        ("target[0]", {"target": [10**400, 0.1]}),
        ("target[0]", {"target": [10**5000, 0.1]}),  # past what `str` writes of an int
        ("target", {"target": [1.0, 1.0]}),
        ("not_after_ms", {"not_after_ms": 0}),
        ("controller", {"controller": {"kp": 1.0}}),
        ("model", {"model": "no-such-model"}),
        ("colour", {"colour": "red"}),
    ],
)
def test_a_bad_field_is_refused_by_name(field: str, change: dict[str, Any]) -> None:
    with pytest.raises(SimReachRefused) as info:
        reach_request({**BODY, **change})
    assert info.value.field == field and info.value.code == "invalid_sim_reach"
    assert isinstance(info.value, InvalidEpisodeRequest)
    assert str(info.value.details["field"]) == field


@pytest.mark.parametrize("missing", ["seed", "target", "episodes", "steps"])
def test_a_missing_field_is_refused_by_name(missing: str) -> None:
    body = {k: v for k, v in BODY.items() if k != missing}
    with pytest.raises(SimReachRefused) as info:
        reach_request(body)
    assert info.value.field == missing


def test_the_intent_is_the_planners_shape_and_admission_keeps_the_cap() -> None:
    build = submit_intent()
    deadline = _now_ms() + 60_000
    write = build("reach-x", KIND, {**BODY, "not_after_ms": deadline})
    assert (write.entity, write.component) == ("reach-x", INTENT)
    request = write.value["request"]
    assert write.value["index"] == 0 and request["not_after_ms"] == deadline
    parsed = EpisodeRequest.from_dict(request)
    assert parsed.seed == 3 and parsed.target == (0.2, 0.1) and parsed.not_after_ms == deadline
    check = admission_check(1 << 30)
    assert check(ActivityRequest(KIND, "reach-x", request)) is None
    huge = build("reach-y", KIND, {**BODY, "episodes": 1000, "steps": 10_000_000})
    refusal = check(ActivityRequest(KIND, "reach-y", huge.value["request"]))
    assert refusal is not None and refusal.code == "request_too_large"
    with pytest.raises(SimReachRefused) as info:
        build("reach-z", "physical_ai.robot_move.absolute", BODY)
    assert info.value.field == "kind"


def test_not_after_is_part_of_the_request_digest_only_when_set() -> None:
    plain = EpisodeRequest.create((0.2, 0.1), seed=3, episodes=1, steps=200)
    assert "not_after_ms" not in plain.to_dict()
    timed = dataclasses.replace(plain, not_after_ms=_now_ms() + 1000)
    assert EpisodeRequest.from_dict(timed.to_dict()) == timed
    assert timed.digest() != plain.digest()
    assert not plain.expired(_now_ms()) and timed.expired(timed.not_after_ms or 0)


def test_past_not_after_the_provider_never_starts_and_its_decision_stands(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path, memory_cap_bytes=1 << 30)
    late = EpisodeRequest.from_dict(reach_request({**BODY, "not_after_ms": _now_ms() - 1}))
    with pytest.raises(AttemptExpired) as first:
        provider.execute("late", 1, late)
    op = provider.entry("late")
    assert op.attempts() == [] and op.result() is None
    assert first.value.proof["not_after_ms"] == late.not_after_ms
    with pytest.raises(AttemptExpired) as second:
        provider.execute("late", 2, late)
    assert second.value.proof == first.value.proof  # the first decision stands
    assert op.attempts() == []
    provider.close()


def test_before_not_after_it_runs_and_a_result_is_reused_after_it(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path, memory_cap_bytes=1 << 30)
    soon = EpisodeRequest.from_dict(reach_request({**BODY, "not_after_ms": _now_ms() + 60_000}))
    outcome = provider.execute("soon", 1, soon)
    assert not outcome.reused and outcome.summary["seed"] == 3
    op = provider.entry("soon")
    assert op.attempts() == [1]
    # Even once the start would be refused, the published result is reused, never expired.
    op.record_proof("expired", {"operation_id": "soon", "not_after_ms": soon.not_after_ms})
    again = provider.execute("soon", 2, soon)
    assert again.reused and again.digest == outcome.digest and op.attempts() == [1]
    provider.close()


def test_the_episode_process_checks_not_after_before_its_marker(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path, memory_cap_bytes=1 << 30)
    late = reach_request({**BODY, "not_after_ms": _now_ms() - 1})
    op = provider.entry("late")
    job = json.dumps({"operation_id": "late", "request": late}).encode()
    argv = [sys.executable, "-m", "tether.families.sim._child", str(op.path), "1"]
    argv.append(str(os.getpid()))
    done = subprocess.run(argv, input=job, capture_output=True, check=False)
    assert done.returncode == EXIT_EXPIRED, done.stderr
    assert op.attempts() == [] and op.result() is None
    provider.close()


def test_a_memory_cap_at_a_reachs_fixed_cost_is_refused() -> None:
    """A cap of exactly a reach's fixed cost (64 MiB) was taken, and every reach was then
    refused: none can run under it."""
    from tether.families.sim._memory import BYTES_PER_REQUEST, check_cap

    with pytest.raises(InvalidEpisodeRequest):
        check_cap(BYTES_PER_REQUEST)
    assert check_cap(BYTES_PER_REQUEST + (1 << 20)) == BYTES_PER_REQUEST + (1 << 20)
