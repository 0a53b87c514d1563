"""Seeded, deterministic reaching episodes on a shipped MuJoCo model, and their result file.

Determinism rules: all randomness comes from one `numpy.random.Generator(PCG64(seed))` drawn in a
fixed order (per episode: the initial joint angles, then the whole noise sequence); each process
owns exactly one `MjData` per model, reset before every episode. The same request therefore gives
byte-identical trajectory arrays, and so the same trajectory digest, in any process on the same
build. The result file is a zip of `.npy` arrays plus `summary.json`, written with fixed zip
timestamps and holding no wall time (that is `EpisodeRun.wall_time_s`, never written), so the
same request and attempt give the same result file byte for byte, and the same result digest.

A request may carry `not_after_ms` (ms since the epoch, the host's clock; set by a submitted
reach, e.g. over gRPC): its episodes start only while the clock is before it. It is part of the
request (and so of its digest) but never of the trajectory: the arrays, and the trajectory
digest, depend on the model, seed, target, controller, episodes and steps alone.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import platform
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mujoco  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from tether.families.sim._model import DEFAULT_MODEL, ModelFile, load_model_file
from tether.families.sim.errors import InvalidEpisodeRequest, ResultCorrupt

FloatArray = npt.NDArray[np.float64]
#: Progress callback: (steps done over all episodes, total steps, current fingertip error in m).
ProgressFn = Callable[[int, int, float], None]

SUMMARY_SCHEMA = "tether.families.sim.sim_episode.summary/1"
RESULT_MEDIA_TYPE = "application/x-tether-sim-episode+zip"
ARRAY_NAMES = ("ctrl", "error", "initial_qpos", "qpos", "qvel", "tip")
MAX_EPISODES = 1000
MAX_STEPS = 10_000_000
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# The arm's link lengths (shoulder->elbow, elbow->fingertip) in reach_arm_2link.xml, and the
# reachable ring for targets, kept clear of the straight-arm and folded-arm singularities.
_L1, _L2 = 0.2, 0.18
MIN_REACH, MAX_REACH = 0.06, 0.37
# Initial joint angles are drawn uniformly from this box (shoulder, elbow), in radians.
_Q0_LOW = np.array([-1.5, 0.3])
_Q0_HIGH = np.array([1.5, 2.0])


@dataclass(frozen=True)
class ControllerParams:
    """Joint-space PD controller towards the IK solution of the target, plus Gaussian torque noise.

    `tolerance` is the fingertip distance (m) under which an episode counts as a success.
    """

    kp: float = 4.0
    kd: float = 0.4
    noise_std: float = 0.02
    tolerance: float = 0.01

    def to_dict(self) -> dict[str, float]:
        """Plain-JSON form."""
        return {
            "kp": self.kp,
            "kd": self.kd,
            "noise_std": self.noise_std,
            "tolerance": self.tolerance,
        }


@dataclass(frozen=True)
class EpisodeRequest:
    """The immutable input of one simulation activity: what to run and with which seed."""

    target: tuple[float, float]
    seed: int
    episodes: int = 1
    steps: int = 1000
    controller: ControllerParams = field(default_factory=ControllerParams)
    model: str = DEFAULT_MODEL
    model_digest: str = ""
    #: The episodes start only while the host's clock (ms since the epoch) is before this.
    not_after_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        """Whether the episodes may no longer start at `now_ms` (never without `not_after_ms`)."""
        return self.not_after_ms is not None and now_ms >= self.not_after_ms

    @classmethod
    def create(
        cls,
        target: tuple[float, float],
        seed: int,
        *,
        episodes: int = 1,
        steps: int = 1000,
        controller: ControllerParams | None = None,
        model: str = DEFAULT_MODEL,
    ) -> EpisodeRequest:
        """Build a validated request pinned to the shipped model's current digest."""
        digest = load_model_file(model).digest
        return cls.from_dict(
            {
                "model": model,
                "model_digest": digest,
                "seed": seed,
                "episodes": episodes,
                "steps": steps,
                "target": list(target),
                "controller": (controller or ControllerParams()).to_dict(),
            }
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EpisodeRequest:
        """Validate a JSON-shaped request; raises `InvalidEpisodeRequest` naming the bad field."""
        if not isinstance(raw, Mapping):
            raise InvalidEpisodeRequest(f"request must be an object, got {type(raw).__name__}")
        known = {
            "model",
            "model_digest",
            "seed",
            "episodes",
            "steps",
            "target",
            "controller",
            "not_after_ms",
        }
        extra = sorted(set(raw) - known)
        if extra:
            raise InvalidEpisodeRequest(f"unknown request fields {extra}")
        model = _field(raw, "model", str)
        digest = _field(raw, "model_digest", str)
        if not digest.startswith("sha256:"):
            raise InvalidEpisodeRequest("model_digest must be 'sha256:<hex>'")
        seed = _int(raw, "seed", 0, 2**63 - 1)
        episodes = _int(raw, "episodes", 1, MAX_EPISODES)
        steps = _int(raw, "steps", 0, MAX_STEPS)
        target_raw = raw.get("target")
        if not isinstance(target_raw, list | tuple) or len(target_raw) != 2:
            raise InvalidEpisodeRequest("target must be a list of two numbers [x, y]")
        x, y = (_number(v, "target") for v in target_raw)
        reach = math.hypot(x, y)
        if not MIN_REACH <= reach <= MAX_REACH:
            raise InvalidEpisodeRequest(
                f"target ({x}, {y}) is {reach:.3f} m from the shoulder; reachable ring is "
                f"[{MIN_REACH}, {MAX_REACH}] m"
            )
        c = raw.get("controller")
        if not isinstance(c, Mapping):
            raise InvalidEpisodeRequest("controller must be an object")
        extra = sorted(set(c) - {"kp", "kd", "noise_std", "tolerance"})
        if extra:
            raise InvalidEpisodeRequest(f"unknown controller fields {extra}")
        params = ControllerParams(
            kp=_bounded(c, "kp", 1e-6, 1e4),
            kd=_bounded(c, "kd", 0.0, 1e3),
            noise_std=_bounded(c, "noise_std", 0.0, 10.0),
            tolerance=_bounded(c, "tolerance", 1e-6, 1.0),
        )
        not_after = raw.get("not_after_ms")
        if not_after is not None:
            not_after = _int(raw, "not_after_ms", 1, 2**63 - 1)
        return cls(
            target=(x, y),
            seed=seed,
            episodes=episodes,
            steps=steps,
            controller=params,
            model=model,
            model_digest=digest,
            not_after_ms=not_after,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the inverse of `from_dict`; `not_after_ms` only when set, so a
        request without one keeps the digest it always had)."""
        doc: dict[str, Any] = {
            "model": self.model,
            "model_digest": self.model_digest,
            "seed": self.seed,
            "episodes": self.episodes,
            "steps": self.steps,
            "target": [self.target[0], self.target[1]],
            "controller": self.controller.to_dict(),
        }
        if self.not_after_ms is not None:
            doc["not_after_ms"] = self.not_after_ms
        return doc

    def canonical_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys, no spaces): the input the digest is taken over."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    def digest(self) -> str:
        """`sha256:` digest of the canonical JSON: the immutable input digest of an Admission."""
        return "sha256:" + hashlib.sha256(self.canonical_json()).hexdigest()


def _field(raw: Mapping[str, Any], name: str, kind: type) -> Any:
    if name not in raw:
        raise InvalidEpisodeRequest(f"missing field {name!r}")
    value = raw[name]
    if not isinstance(value, kind):
        raise InvalidEpisodeRequest(f"{name} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _int(raw: Mapping[str, Any], name: str, lo: int, hi: int) -> int:
    value = _field(raw, name, int)
    if isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidEpisodeRequest(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def finite_number(value: object) -> bool:
    """Whether `value` is a finite number a float holds (an int past a float's range is not:
    `math.isfinite` raised `OverflowError` on it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown_number(value: object) -> str:
    """`value` for a refusal: its repr, but an int past a float's range by its size (its
    digits may be more than `str` writes: past 4,300 it raised `ValueError`)."""
    if isinstance(value, int) and not isinstance(value, bool) and not finite_number(value):
        return f"an integer of about {value.bit_length() * 30103 // 100000 + 1} digits"
    return repr(value)


def _number(value: Any, name: str) -> float:
    if not finite_number(value):
        raise InvalidEpisodeRequest(f"{name} must hold finite numbers, got {shown_number(value)}")
    return float(value)


def _bounded(raw: Mapping[str, Any], name: str, lo: float, hi: float) -> float:
    if name not in raw:
        raise InvalidEpisodeRequest(f"missing controller field {name!r}")
    value = _number(raw[name], f"controller.{name}")
    if not lo <= value <= hi:
        raise InvalidEpisodeRequest(f"controller.{name} must be in [{lo}, {hi}], got {value}")
    return value


def inverse_kinematics(target: tuple[float, float]) -> FloatArray:
    """Joint angles (shoulder, elbow-up-positive) placing the fingertip on `target`."""
    x, y = target
    c2 = (x * x + y * y - _L1 * _L1 - _L2 * _L2) / (2 * _L1 * _L2)
    q2 = math.acos(max(-1.0, min(1.0, c2)))
    q1 = math.atan2(y, x) - math.atan2(_L2 * math.sin(q2), _L1 + _L2 * math.cos(q2))
    return np.array([q1, q2])


@dataclass
class EpisodeRun:
    """The recorded arrays of all episodes of one request, and the summary (the observation).

    `wall_time_s` is how long the episodes took here: measured, never part of the summary or
    the result file, so nothing digested depends on the clock.
    """

    arrays: dict[str, FloatArray]
    summary: dict[str, Any]
    wall_time_s: float = 0.0


# One MjData per process and model digest: episodes reset it rather than allocating a new one.
_PROCESS_SIM: dict[str, tuple[mujoco.MjModel, mujoco.MjData]] = {}


def process_sim(model_file: ModelFile) -> tuple[mujoco.MjModel, mujoco.MjData]:
    """This process's compiled model and its single `MjData`."""
    sim = _PROCESS_SIM.get(model_file.digest)
    if sim is None:
        model = model_file.compile()
        sim = (model, mujoco.MjData(model))
        _PROCESS_SIM[model_file.digest] = sim
    return sim


def versions() -> dict[str, str]:
    """Versions recorded in every result: numpy, mujoco, python."""
    return {
        "numpy": np.__version__,
        "mujoco": mujoco.__version__,
        "python": platform.python_version(),
    }


def run_episodes(
    request: EpisodeRequest,
    progress: ProgressFn | None = None,
    *,
    progress_every: int = 1000,
) -> EpisodeRun:
    """Run every episode of `request` and return the arrays and summary; pure but for the clock."""
    started = time.perf_counter()
    model_file = load_model_file(request.model, digest=request.model_digest)
    model, data = process_sim(model_file)
    tip_id = model.site("fingertip").id
    n_ep, n_steps = request.episodes, request.steps
    total = n_ep * n_steps
    kp, kd = request.controller.kp, request.controller.kd
    target = np.array(request.target)
    q_goal = inverse_kinematics(request.target)
    rng = np.random.Generator(np.random.PCG64(request.seed))

    initial = np.empty((n_ep, 2))
    qpos = np.empty((n_ep, n_steps, 2))
    qvel = np.empty((n_ep, n_steps, 2))
    ctrl = np.empty((n_ep, n_steps, 2))
    tip = np.empty((n_ep, n_steps, 2))
    final_errors: list[float] = []
    every = max(1, progress_every)
    dq, dv, dc, dtip = data.qpos, data.qvel, data.ctrl, data.site_xpos[tip_id]
    for e in range(n_ep):
        initial[e] = rng.uniform(_Q0_LOW, _Q0_HIGH)
        noise = rng.normal(0.0, request.controller.noise_std, size=(n_steps, 2))
        mujoco.mj_resetData(model, data)
        dq[:] = initial[e]
        mujoco.mj_forward(model, data)
        q_e, v_e, c_e, t_e = qpos[e], qvel[e], ctrl[e], tip[e]
        for lo in range(0, n_steps, every):
            for t in range(lo, min(lo + every, n_steps)):
                dc[:] = kp * (q_goal - dq) - kd * dv + noise[t]
                mujoco.mj_step(model, data)
                q_e[t] = dq
                v_e[t] = dv
                c_e[t] = dc
                t_e[t] = dtip[:2]
            if progress is not None:
                done = e * n_steps + min(lo + every, n_steps)
                progress(done, total, float(np.hypot(*(dtip[:2] - target))))
        final_errors.append(float(np.hypot(*(dtip[:2] - target))))
    if progress is not None and total == 0:
        progress(0, 0, final_errors[-1])
    error = np.linalg.norm(tip - target, axis=2) if n_steps else np.empty((n_ep, 0))
    arrays = {
        "ctrl": ctrl,
        "error": error,
        "initial_qpos": initial,
        "qpos": qpos,
        "qvel": qvel,
        "tip": tip,
    }
    tol = request.controller.tolerance
    summary: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "success": all(err < tol for err in final_errors),
        "final_error": final_errors[-1],
        "final_errors": final_errors,
        "final_tip": [float(dtip[0]), float(dtip[1])],
        "target": [request.target[0], request.target[1]],
        "steps": total,
        "episodes": n_ep,
        "steps_per_episode": n_steps,
        "seed": request.seed,
        "model": model_file.name,
        "model_digest": model_file.digest,
        "timestep": float(model.opt.timestep),
        "versions": versions(),
        "request_digest": request.digest(),
        "trajectory_digest": trajectory_digest(arrays),
    }
    return EpisodeRun(arrays=arrays, summary=summary, wall_time_s=time.perf_counter() - started)


def _npy_bytes(array: FloatArray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def trajectory_digest(arrays: Mapping[str, FloatArray]) -> str:
    """`sha256:` digest over the arrays' `.npy` encodings in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        blob = _npy_bytes(arrays[name])
        h.update(f"{name}\0{len(blob)}\0".encode())
        h.update(blob)
    return "sha256:" + h.hexdigest()


def encode_result(run: EpisodeRun) -> bytes:
    """The result file: a stored (uncompressed) zip of `<name>.npy` arrays and `summary.json`."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(run.arrays):
            zf.writestr(zipfile.ZipInfo(f"{name}.npy", _ZIP_TIME), _npy_bytes(run.arrays[name]))
        summary = json.dumps(run.summary, sort_keys=True, separators=(",", ":")).encode()
        zf.writestr(zipfile.ZipInfo("summary.json", _ZIP_TIME), summary)
    return buf.getvalue()


def read_summary(blob: bytes) -> dict[str, Any]:
    """Only the summary of a result file (arrays not read, digest not checked).

    For bytes whose integrity is already established (a digest-checked artifact, or the file
    the attempt process just published); use `decode_result` for anything read at rest.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            summary = json.loads(zf.read("summary.json"))
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError) as exc:
        raise ResultCorrupt(f"result file has no readable summary: {exc}") from exc
    if not isinstance(summary, dict) or summary.get("schema") != SUMMARY_SCHEMA:
        raise ResultCorrupt("result summary is missing or has the wrong schema")
    return summary


def decode_result(blob: bytes) -> EpisodeRun:
    """Read and verify a result file; raises `ResultCorrupt` unless it is complete and intact."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            names = set(zf.namelist())
            expected = {f"{n}.npy" for n in ARRAY_NAMES} | {"summary.json"}
            if names != expected:
                raise ResultCorrupt(f"result members {sorted(names)} != {sorted(expected)}")
            summary = json.loads(zf.read("summary.json"))
            arrays = {
                n: np.lib.format.read_array(io.BytesIO(zf.read(f"{n}.npy")), allow_pickle=False)
                for n in ARRAY_NAMES
            }
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError) as exc:
        raise ResultCorrupt(f"result file is not a readable archive: {exc}") from exc
    if not isinstance(summary, dict) or summary.get("schema") != SUMMARY_SCHEMA:
        raise ResultCorrupt("result summary is missing or has the wrong schema")
    if summary.get("trajectory_digest") != trajectory_digest(arrays):
        raise ResultCorrupt("result arrays do not match the summary's trajectory digest")
    return EpisodeRun(arrays=arrays, summary=summary)
