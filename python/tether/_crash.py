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

import atexit
import os
import random
import signal
import sys
import threading
from typing import Final

#: The variable naming the crash point (crash tests only).
CRASH_ENV: Final = "TETHER_CRASH_AT"
#: The variable of the random sweep.
CRASH_RANDOM_ENV: Final = "TETHER_CRASH_RANDOM"
#: Set in a provider's child process that was handed its parent's crash point
#: (`child_environment`): the parent says whether it was reached, not each child.
CRASH_CHILD_ENV: Final = "TETHER_CRASH_CHILD"


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
#: Whether this process handed its crash point to a child process (`child_environment`).
_handed = False


def _never_reached() -> None:
    """At a normal exit of a process whose `TETHER_CRASH_AT` point never fired here and was
    handed to no child: said on stderr, so a crash test of a point this run never reaches
    (a point of another adapter, or of a process this one does not start) is not taken for
    one that crashed and recovered."""
    if _handed or os.environ.get(CRASH_CHILD_ENV):
        return
    try:
        sys.stderr.write(
            f"tether: {CRASH_ENV}={os.environ.get(CRASH_ENV)} was never reached in this process"
            f" (pid {os.getpid()}): no crash was injected\n"
        )
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing to say it on
        pass


if _TARGET is not None:
    atexit.register(_never_reached)


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
    global _handed
    env = {
        k: v for k, v in environ.items() if k not in (CRASH_ENV, CRASH_RANDOM_ENV, CRASH_CHILD_ENV)
    }
    target = environ.get(CRASH_ENV)
    if target and target.startswith(prefix):
        env[CRASH_ENV] = target
        env[CRASH_CHILD_ENV] = "1"
        _handed = True
    return env


__all__ = [
    "CRASH_CHILD_ENV",
    "CRASH_ENV",
    "CRASH_RANDOM_ENV",
    "child_environment",
    "crash_point",
]
