"""Benchmark: seeded MuJoCo episodes through Tether against a bare MuJoCo loop, on one core.

Baseline: a plain Python loop over the same shipped model, step count, controller and noise
stream, recording the same arrays (checked: both give the same trajectory digest). Tether path:
`SimProvider.execute` — episode child process with die-with-parent, create-if-absent start
marker, durable result file (fsync + rename), then read back and verified. Both run pinned to
one CPU in the same process run, interleaved. Also reported: per-activity overhead of a
zero-step activity, in ms.

Usage: python benches/sim_episode.py [--activities N] [--episodes E] [--steps S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import mujoco  # type: ignore[import-untyped]
import numpy as np
from tether.physical import EpisodeRequest, SimProvider, load_model_file, trajectory_digest
from tether.physical._episode import _Q0_HIGH, _Q0_LOW, inverse_kinematics


def bare_loop(request: EpisodeRequest) -> str:
    """The baseline: the same episodes with nothing around them; returns the trajectory digest."""
    model = mujoco.MjModel.from_xml_string(load_model_file(request.model).xml.decode())
    data = mujoco.MjData(model)
    tip_id = model.site("fingertip").id
    n_ep, n = request.episodes, request.steps
    kp, kd = request.controller.kp, request.controller.kd
    goal = inverse_kinematics(request.target)
    target = np.array(request.target)
    rng = np.random.Generator(np.random.PCG64(request.seed))
    initial = np.empty((n_ep, 2))
    qpos, qvel, ctrl, tip = (np.empty((n_ep, n, 2)) for _ in range(4))
    q, v, c, x = data.qpos, data.qvel, data.ctrl, data.site_xpos[tip_id]
    for e in range(n_ep):
        initial[e] = rng.uniform(_Q0_LOW, _Q0_HIGH)
        noise = rng.normal(0.0, request.controller.noise_std, size=(n, 2))
        mujoco.mj_resetData(model, data)
        q[:] = initial[e]
        mujoco.mj_forward(model, data)
        for t in range(n):
            c[:] = kp * (goal - q) - kd * v + noise[t]
            mujoco.mj_step(model, data)
            qpos[e, t] = q
            qvel[e, t] = v
            ctrl[e, t] = c
            tip[e, t] = x[:2]
    error = np.linalg.norm(tip - target, axis=2)
    arrays = {"ctrl": ctrl, "error": error, "initial_qpos": initial, "qpos": qpos}
    arrays |= {"qvel": qvel, "tip": tip}
    return trajectory_digest(arrays)


def main() -> int:
    """Run the benchmark and print both rates and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--zero-step-activities", type=int, default=10)
    args = parser.parse_args()
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # children inherit it: both paths share this one core

    with tempfile.TemporaryDirectory(prefix="tether-bench-") as root:
        provider = SimProvider(Path(root))
        bare_s: list[float] = []
        tether_s: list[float] = []
        for i in range(args.activities):
            req = EpisodeRequest.create(
                (0.22, 0.12), seed=1000 + i, episodes=args.episodes, steps=args.steps
            )
            t0 = time.perf_counter()
            bare_digest = bare_loop(req)
            bare_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            outcome = provider.execute(f"bench-{i}", 1, req)
            tether_s.append(time.perf_counter() - t0)
            if outcome.summary["trajectory_digest"] != bare_digest:
                raise SystemExit("bare loop and Tether recorded different arrays")

        zero: list[float] = []
        for i in range(args.zero_step_activities):
            req = EpisodeRequest.create((0.22, 0.12), seed=i, episodes=1, steps=0)
            t0 = time.perf_counter()
            provider.execute(f"zero-{i}", 1, req)
            zero.append(time.perf_counter() - t0)

    steps = args.episodes * args.steps
    bare_rate = steps / statistics.median(bare_s)
    tether_rate = steps / statistics.median(tether_s)
    print(f"cpu {cpu}; {args.activities} activities of {args.episodes} x {args.steps} steps")
    print(
        f"bare MuJoCo loop   : {bare_rate:12,.0f} steps/s (median {statistics.median(bare_s):.3f}s)"
    )
    med = statistics.median(tether_s)
    print(f"Tether SimProvider : {tether_rate:12,.0f} steps/s (median {med:.3f} s)")
    print(f"ratio Tether / bare  : {tether_rate / bare_rate:.3f}   (target >= 0.8)")
    print(f"zero-step activity overhead: median {1000 * statistics.median(zero):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
