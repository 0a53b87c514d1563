"""The one crash-injection mechanism (runtime and providers); a no-op unless `TETHER_CRASH_AT`
or `TETHER_CRASH_RANDOM` is set.

`TETHER_CRASH_AT=name` SIGKILLs the process the first time `crash_point(name)` runs, and
`name@N` the N-th time. A point that knows its attempt (`crash_point(name, attempt=k)`, a
provider whose attempts run in processes of their own) counts attempts instead: `name` fires in
attempt 1, `name@k` in attempt k, `name@*` in every attempt (a provider that always dies).
`TETHER_CRASH_RANDOM=seed:p` kills at any point with probability p. The environment is read
once at import, so normal runs pay one global lookup per point.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import Final

#: The variable naming the crash point (crash tests only).
CRASH_ENV: Final = "TETHER_CRASH_AT"
#: The variable of the random sweep.
CRASH_RANDOM_ENV: Final = "TETHER_CRASH_RANDOM"


def _parse() -> tuple[str | None, str, random.Random | None, float]:
    target = os.environ.get(CRASH_ENV) or None
    which = ""
    if target and "@" in target:
        target, _, which = target.partition("@")
    rnd, prob = None, 0.0
    spec = os.environ.get(CRASH_RANDOM_ENV)
    if spec:
        seed, _, p = spec.partition(":")
        rnd, prob = random.Random(int(seed)), float(p)
    return target, which, rnd, prob


_TARGET, _WHICH, _RANDOM, _PROB = _parse()
_ARMED: Final = _TARGET is not None or _RANDOM is not None
_hits = 0
_mutex = threading.Lock()


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(name: str, *, attempt: int | None = None) -> None:
    """SIGKILL this process if the crash environment selects `name` (in `attempt`, for a point
    that knows its attempt); otherwise do nothing."""
    if not _ARMED:
        return
    global _hits
    with _mutex:
        if name == _TARGET:
            if attempt is not None:
                if _WHICH == "*" or int(_WHICH or "1") == attempt:
                    _kill()
            else:
                _hits += 1
                if _hits == int(_WHICH or "1"):
                    _kill()
        if _RANDOM is not None and _RANDOM.random() < _PROB:
            _kill()


def child_environment(environ: dict[str, str], prefix: str) -> dict[str, str]:
    """The environment for a provider's child process: the crash point only when it names one
    of the child's own points (`prefix`), and never the random sweep (the parent's points must
    not fire in a child that shares its modules)."""
    env = {k: v for k, v in environ.items() if k not in (CRASH_ENV, CRASH_RANDOM_ENV)}
    target = environ.get(CRASH_ENV)
    if target and target.startswith(prefix):
        env[CRASH_ENV] = target
    return env


__all__ = ["CRASH_ENV", "CRASH_RANDOM_ENV", "child_environment", "crash_point"]
