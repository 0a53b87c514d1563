"""Sampled sweep points: the default run takes a few of a sweep's points, a different few each
run, so repeated runs cover every point; TETHER_SLOW=1 runs them all (`tests/conftest.py`
skips the `slow` rest). The seed is in the pytest header; `TETHER_SAMPLE_SEED=N` replays it."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

SEED = int(os.environ.get("TETHER_SAMPLE_SEED") or random.SystemRandom().randrange(1 << 32))
# Processes started later (pytest-xdist's workers, started by the process that imports this
# first, from tests/conftest.py) sample alike, so every one of them collects the same tests.
os.environ["TETHER_SAMPLE_SEED"] = str(SEED)


def sampled(name: str, points: Sequence[T], k: int) -> tuple[T, ...]:
    """``k`` of ``points`` for this run's sample of the sweep ``name`` (in their order)."""
    rng = random.Random(f"{SEED}:{name}")
    chosen = set(rng.sample(range(len(points)), min(k, len(points))))
    return tuple(p for i, p in enumerate(points) if i in chosen)
