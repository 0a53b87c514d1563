"""Benchmark (issue 2, 5b): tether.patch.apply against jsonpatch on 10 KB and 100 KB documents.

Copying mode (the input is never mutated) is compared with ``jsonpatch.apply_patch(doc, p)``,
which deep-copies; the atomic in-place mode with ``jsonpatch.apply_patch(doc, p,
in_place=True, atomic=True)``, jsonpatch 1.48's journalled in-place mode. Each measurement is
the best of several timed batches, both sides in this one process; the script prints ratios.
Run: ``make bench`` or ``.venv/bin/python benches/patch_apply.py``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
from tether import patch

TARGETS = {"copy": 10.0, "in place": 5.0}


def make_doc(size_bytes: int) -> dict[str, Any]:
    """A progress-like document: a list of step records plus a summary object."""
    steps: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "title": "pick and place",
        "status": "running",
        "summary": {"done": 7, "failed": 0, "eta_ms": 1200, "labels": ["arm", "gripper"]},
        "steps": steps,
    }
    i = 0
    while len(json.dumps(doc)) < size_bytes:
        steps.append(
            {
                "id": f"step-{i}",
                "name": f"move joint {i % 6} to target",
                "status": "done" if i % 3 else "pending",
                "progress": (i % 10) / 10,
                "attempt": {"number": 1, "fence": i, "owner": "worker-a"},
                "tags": ["sim", "dxl"] if i % 2 else ["sim"],
            }
        )
        i += 1
    return doc


def one_op(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/summary/done", "value": 7}]


def twenty_ops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Twenty operations of every kind that leave the document as it was (so in place repeats)."""
    n = len(doc["steps"])
    mid = n // 2
    step = doc["steps"][mid]
    return [
        {"op": "test", "path": "/title", "value": "pick and place"},
        {"op": "replace", "path": "/status", "value": "running"},
        {"op": "replace", "path": f"/steps/{mid}/progress", "value": step["progress"]},
        {"op": "replace", "path": f"/steps/{mid}/status", "value": step["status"]},
        {"op": "add", "path": "/steps/-", "value": {"id": "extra", "status": "pending"}},
        {"op": "test", "path": f"/steps/{n}/id", "value": "extra"},
        {"op": "remove", "path": f"/steps/{n}"},
        {"op": "add", "path": "/summary/note", "value": {"text": "ok", "level": [1, 2]}},
        {"op": "copy", "from": "/summary/note", "path": "/summary/note2"},
        {"op": "remove", "path": "/summary/note2"},
        {"op": "remove", "path": "/summary/note"},
        {"op": "move", "from": "/summary/eta_ms", "path": "/summary/eta"},
        {"op": "move", "from": "/summary/eta", "path": "/summary/eta_ms"},
        {"op": "add", "path": "/summary/labels/1", "value": "camera"},
        {"op": "remove", "path": "/summary/labels/1"},
        {"op": "replace", "path": "/summary/failed", "value": 0},
        {"op": "test", "path": "/summary/labels", "value": ["arm", "gripper"]},
        {"op": "replace", "path": "/steps/0/attempt/fence", "value": 0},
        {"op": "test", "path": f"/steps/{mid}/attempt/owner", "value": "worker-a"},
        {"op": "replace", "path": "/summary/done", "value": 7},
    ]


def best_per_call(fn: Callable[[], object], budget_s: float = 0.25, repeats: int = 5) -> float:
    """Seconds per call: the best of `repeats` batches, each sized to about `budget_s`."""
    fn()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s / 5 or number >= 1 << 20:
            break
        number *= 2
    number = max(1, int(number * (budget_s / 5) / max(elapsed, 1e-9)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main() -> int:
    print(f"jsonpatch {jsonpatch.__version__}; times are the best per-call of 5 batches")
    print(f"{'case':<32} {'tether':>11} {'jsonpatch':>11} {'ratio':>8}  target")
    misses = 0
    for size in (10_000, 100_000):
        doc = make_doc(size)
        reference = json.loads(json.dumps(doc))
        for label, build in (("1 op", one_op), ("20 ops", twenty_ops)):
            ops = build(doc)
            # Both libraries must agree before either is timed.
            assert patch.apply(doc, ops) == jsonpatch.apply_patch(doc, ops)
            cases = {
                "copy": (
                    lambda d=doc, o=ops: patch.apply(d, o),
                    lambda d=doc, o=ops: jsonpatch.apply_patch(d, o),
                ),
                "in place": (
                    lambda d=doc, o=ops: patch.apply(d, o, in_place=True),
                    lambda d=doc, o=ops: jsonpatch.apply_patch(d, o, in_place=True, atomic=True),
                ),
            }
            for mode, (ours, theirs) in cases.items():
                t_ours = best_per_call(ours)
                t_theirs = best_per_call(theirs)
                ratio = t_theirs / t_ours
                target = TARGETS[mode]
                verdict = "ok" if ratio >= target else "MISSED"
                misses += ratio < target
                name = f"{len(json.dumps(doc)) // 1000} KB, {label}, {mode}"
                print(
                    f"{name:<32} {t_ours * 1e6:>9.1f}us {t_theirs * 1e6:>9.1f}us "
                    f"{ratio:>7.1f}x  >={target:g}x {verdict}"
                )
            assert doc == reference, "the in-place patches must leave the document as it was"
    print("all targets met" if not misses else f"{misses} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
