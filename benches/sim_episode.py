"""Benchmark: seeded MuJoCo episodes through Tether against a bare MuJoCo loop, on one core.

Baseline: a plain Python loop over the same shipped model, step count, controller and noise
stream, recording the same arrays (checked: both give the same trajectory digest). Tether path:
a reaching mission on the runtime Host with one worker, from the commit of the first intent to
the settlement of the last activity: projection, admission, claim, bind, the episode process
(die-with-parent, start marker, durable result file), artifact store, result record, staging,
the planner's next intent, observation tick and settlement. Both pinned to one CPU in the same
run. Also reported: per-activity overhead of zero-step activities, admission to settlement.

Usage: python benches/sim_episode.py [--activities N] [--episodes E] [--steps S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import mujoco  # type: ignore[import-untyped]
import numpy as np
from tether.activities import ActivityKey
from tether.families.sim import EpisodeRequest, SimProvider, load_model_file, trajectory_digest
from tether.families.sim._episode import _Q0_HIGH, _Q0_LOW, inverse_kinematics
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.families.sim.family import (
    INTENT,
    KIND,
    MISSION,
    MISSION_ENTITY,
    Mission,
    mission_done,
)
from tether.runtime import Host
from tether.world import ComponentWrite


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


def _through_tether(
    root: Path, targets: int, episodes: int, steps: int, seed: int
) -> tuple[float, list[dict[str, Any]], list[float]]:
    """Run a mission through the Host; (seconds intent->last settlement, requests, per-activity
    admission->settlement seconds)."""
    adapter = SimEpisodeAdapter(root)
    mission = Mission(targets=targets, episodes=episodes, steps=steps, seed=seed)
    component = mission.to_component()
    with Host(root, [sim_family(adapter)], workers=1) as host:
        host.create_world("bench")
        host.commit_tick("bench", [ComponentWrite(MISSION_ENTITY, MISSION, component)])
        host.start()
        t0 = time.perf_counter()
        kick_planner(host, "bench")  # the planner processor commits the first intent
        # The planner's next intent is admitted in the tick that observes the last result, so
        # the world has an unsettled Activity until the mission is done; the wait wakes on the
        # settlement itself (no polling).
        if not host.wait_settled("bench", timeout_s=3600):
            raise SystemExit("the mission did not finish within an hour")
        snap = host.snapshot("bench")
        keys = [ActivityKey("bench", KIND, e) for e, _ in snap.with_component(INTENT)]
        records = [host.get(k) for k in keys]
        if not (mission_done(snap) and all(r is not None and r.settlement for r in records)):
            raise SystemExit("every activity settled but the mission is not done")
        elapsed = time.perf_counter() - t0
        requests = [intent["request"] for _, intent in snap.with_component(INTENT)]
        spans = [
            (r.settlement.settled_at_ms - r.admitted_at_ms) / 1000
            for r in records
            if r is not None and r.settlement is not None
        ]
    adapter.close()
    return elapsed, requests, spans


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
    total_steps = args.activities * args.episodes * args.steps

    with tempfile.TemporaryDirectory(prefix="tether-bench-") as root:
        tether_s, requests, _ = _through_tether(
            Path(root) / "run", args.activities, args.episodes, args.steps, seed=1000
        )
        bare_s = 0.0
        for raw in requests:
            req = EpisodeRequest.from_dict(raw)
            t0 = time.perf_counter()
            bare_loop(req)
            bare_s += time.perf_counter() - t0
        # Same arrays: the bare loop's digest equals the one Tether recorded (checked untimed).
        check = EpisodeRequest.from_dict(requests[0])
        outcome = SimProvider(Path(root) / "check").execute("check", 1, check)
        if outcome.summary["trajectory_digest"] != bare_loop(check):
            raise SystemExit("bare loop and Tether recorded different arrays")

        _, _, spans = _through_tether(Path(root) / "zero", args.zero_step_activities, 1, 0, seed=7)

    bare_rate = total_steps / bare_s
    tether_rate = total_steps / tether_s
    print(
        f"cpu {cpu}; {args.activities} activities of {args.episodes} episodes x {args.steps} "
        "steps, one worker"
    )
    print(f"bare MuJoCo loop            : {bare_rate:12,.0f} steps/s ({bare_s:.2f} s)")
    print(f"Tether (intent->settlement) : {tether_rate:12,.0f} steps/s ({tether_s:.2f} s)")
    print(f"ratio Tether / bare         : {tether_rate / bare_rate:.3f}   (target >= 0.8)")
    print(
        f"zero-step activity, admission->settlement: median "
        f"{1000 * statistics.median(spans):.1f} ms, max {1000 * max(spans):.1f} ms "
        f"over {len(spans)} activities"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
