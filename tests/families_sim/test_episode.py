"""Episode requests validate strictly; runs are seeded and their result files verify."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import mujoco
import numpy as np
import pytest
from tether.errors import TetherError
from tether.families.sim import (
    EpisodeRequest,
    available_models,
    decode_result,
    encode_result,
    load_model_file,
    run_episodes,
)
from tether.families.sim.errors import (
    InvalidEpisodeRequest,
    ModelDigestMismatch,
    ResultCorrupt,
    UnknownModel,
)


def _request(**over: Any) -> dict[str, Any]:
    raw = EpisodeRequest.create((0.25, 0.1), seed=3, episodes=2, steps=300).to_dict()
    raw.update(over)
    return raw


def test_the_reaching_arm_ships_in_the_package_in_radians() -> None:
    assert "reach_arm_2link" in available_models()
    model = load_model_file("reach_arm_2link")
    assert b'angle="radian"' in model.xml
    compiled = model.compile()
    assert (compiled.nq, compiled.nu) == (2, 2)
    assert model.digest.startswith("sha256:")


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": True}, "seed"),
        ({"episodes": 0}, "episodes"),
        ({"steps": 1.5}, "steps"),
        ({"target": [0.0, 0.0]}, "reachable"),
        ({"target": [1.0]}, "target"),
        ({"target": ["x", 0.1]}, "target"),
        ({"controller": {"kp": 1.0}}, "kd"),
        ({"controller": {"kp": -1.0, "kd": 0.1, "noise_std": 0, "tolerance": 0.01}}, "kp"),
        ({"bogus": 1}, "unknown"),
        ({"model_digest": "md5:00"}, "model_digest"),
    ],
)
def test_bad_requests_raise_a_typed_error_naming_the_field(
    over: dict[str, Any], needle: str
) -> None:
    with pytest.raises(InvalidEpisodeRequest, match=needle) as info:
        EpisodeRequest.from_dict(_request(**over))
    assert isinstance(info.value, TetherError)


def test_unknown_model_and_wrong_digest_are_refused_before_running() -> None:
    with pytest.raises(UnknownModel):
        load_model_file("../etc/passwd")
    with pytest.raises(UnknownModel):
        load_model_file("no_such_arm")
    bad = EpisodeRequest.from_dict(_request(model_digest="sha256:" + "0" * 64))
    with pytest.raises(ModelDigestMismatch):
        run_episodes(bad)


def test_request_round_trips_and_its_digest_is_canonical() -> None:
    req = EpisodeRequest.from_dict(_request())
    assert EpisodeRequest.from_dict(req.to_dict()) == req
    assert req.digest() == EpisodeRequest.from_dict(dict(reversed(_request().items()))).digest()


def test_a_run_reaches_the_target_and_records_versions_and_progress() -> None:
    req = EpisodeRequest.from_dict(_request(steps=2000))
    seen: list[tuple[int, int, float]] = []
    run = run_episodes(req, lambda d, t, e: seen.append((d, t, e)), progress_every=500)
    s = run.summary
    assert s["success"] is True and s["final_error"] < 0.01
    assert s["steps"] == 4000 and s["seed"] == 3 and s["timestep"] == 0.002
    assert s["versions"]["mujoco"] == mujoco.__version__
    assert s["versions"]["numpy"] == np.__version__
    assert s["model_digest"] == req.model_digest
    assert [d for d, _, _ in seen] == [500, 1000, 1500, 2000, 2500, 3000, 3500, 4000]
    assert seen[-1][2] == pytest.approx(s["final_error"])
    assert run.arrays["qpos"].shape == (2, 2000, 2)


def test_same_seed_same_arrays_other_seed_other_arrays() -> None:
    a = run_episodes(EpisodeRequest.from_dict(_request()))
    b = run_episodes(EpisodeRequest.from_dict(_request()))
    c = run_episodes(EpisodeRequest.from_dict(_request(seed=4)))
    assert a.summary["trajectory_digest"] == b.summary["trajectory_digest"]
    assert a.summary["trajectory_digest"] != c.summary["trajectory_digest"]


_DIGEST_SCRIPT = """
from tether.families.sim import EpisodeRequest, run_episodes
req = EpisodeRequest.create((0.15, -0.2), seed=99, episodes=3, steps=700)
print(run_episodes(req).summary["trajectory_digest"])
"""


def test_trajectory_digest_is_byte_identical_across_two_processes() -> None:
    digests = [
        subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT], check=True, capture_output=True, text=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert digests[0].startswith("sha256:") and digests[0] == digests[1]


def test_zero_step_episodes_give_an_initial_error_and_empty_arrays() -> None:
    run = run_episodes(EpisodeRequest.from_dict(_request(steps=0)))
    assert run.summary["steps"] == 0 and run.summary["final_error"] > 0
    assert run.arrays["qpos"].shape == (2, 0, 2)
    assert decode_result(encode_result(run)).summary == run.summary


def test_result_file_round_trips_and_any_damage_is_detected() -> None:
    run = run_episodes(EpisodeRequest.from_dict(_request()))
    blob = encode_result(run)
    back = decode_result(blob)
    assert back.summary == run.summary
    assert all(np.array_equal(back.arrays[k], v) for k, v in run.arrays.items())
    with pytest.raises(ResultCorrupt):
        decode_result(blob[: len(blob) // 2])
    with pytest.raises(ResultCorrupt):
        decode_result(b"")
    i = blob.index(b"qvel.npy") + 500
    flipped = blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1 :]
    with pytest.raises(ResultCorrupt):
        decode_result(flipped)


def test_the_result_file_is_an_npz_that_numpy_reads_with_its_summary() -> None:
    run = run_episodes(EpisodeRequest.from_dict(_request()))
    with np.load(io.BytesIO(encode_result(run)), allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted([*run.arrays, "summary.json"])
        assert all(np.array_equal(npz[k], v) for k, v in run.arrays.items())
        assert json.loads(npz["summary.json"]) == run.summary
