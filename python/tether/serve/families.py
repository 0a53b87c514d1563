"""The families `tether serve` runs: factories named by dotted path in `[serve] families`.

A factory is `module:function` taking a `ServeContext` and returning a list whose items are a
`Family`, or a `(Family, submit)` pair where `submit(activity_id, kind, request)` checks a
submitted request and returns the intent `ComponentWrite` that asks for it (what `submit` on
the control socket commits). A family without one runs (its own processors commit intents)
but cannot be submitted to (`not_submittable`). Factories are loaded on first use, so this
package imports no family and no protocol.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.runtime import Family
from tether.runtime._errors import bad_families, call_factory
from tether.world import ComponentWrite

Submit = Callable[[str, str, dict[str, Any]], ComponentWrite]


@dataclass(frozen=True)
class ServeContext:
    """What a family factory gets: the host configuration, the daemon's device host (the one
    owner of the ports), the data dir and the `[serve]` settings."""

    config: Any
    device_host: Any
    data_dir: Path
    settle_timeout_s: float
    closers: list[Callable[[], None]] = field(default_factory=list)
    #: This host's name (`[serve] host_name`): device work is admitted bound to it.
    host_name: str = ""
    #: The world ledger is shared with other hosts (PostgreSQL): another host may project
    #: this host's intents, so a device's intent names the host that owns the device.
    shared_world: bool = False
    #: The daemon's session heartbeats (`tether.serve.sessions.Sessions`, in memory): the gate
    #: a family starts a move submitted under a `session_id` through (`begin`/`end`).
    sessions: Any = None

    def on_close(self, close: Callable[[], None]) -> None:
        """Run `close` when the daemon stops (after its workers, before its storage closes)."""
        self.closers.append(close)


@dataclass(frozen=True)
class Served:
    """One family as the daemon serves it."""

    family: Family
    submit: Submit | None = None


def load(spec: str, ctx: ServeContext) -> list[Served]:
    """Import and call the factory `module:function`; its families."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise bad_families(f"serve.families: {spec!r} is not module:function")
    try:
        factory = getattr(importlib.import_module(module_name), attr, None)
    except ImportError as exc:
        raise bad_families(f"serve.families: cannot import {module_name}: {exc}") from None
    if not callable(factory):
        raise bad_families(f"serve.families: {spec!r} is not a callable")
    return call_factory(f"serve.families: {spec}", lambda: load_items(factory(ctx), spec))


def load_items(items: Sequence[Any], spec: str) -> list[Served]:
    """What a factory returned, as served families (`spec` names the factory in errors)."""
    out: list[Served] = []
    for item in items:
        if isinstance(item, Family):
            out.append(Served(item))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Family):
            out.append(Served(item[0], item[1]))
        else:
            raise bad_families(f"serve.families: {spec} returned {type(item).__name__}")
    return out


def sim_families(ctx: ServeContext) -> list[Any]:
    """Seeded MuJoCo reaches (`physical_ai.sim_episode`, the demo's family) with their submit
    (`tether.families.sim.family.submit_intent`): a mission's planner commits its own intents,
    and a submitted reach (the control socket's `submit`, gRPC's `Execute` on the simulated
    arm "sim") commits one intent of the same shape."""
    from tether.families.sim.adapter import SimEpisodeAdapter, sim_family
    from tether.families.sim.family import submit_intent
    from tether.runtime._errors import bad_families

    if not hasattr(ctx, "data_dir"):  # `tether worker` hands its factory a data dir
        raise bad_families(
            "tether.serve.families:sim_families is tether serve's factory; tether worker"
            " takes tether.families.sim.adapter:worker_families"
        )

    adapter = SimEpisodeAdapter(ctx.data_dir)
    ctx.on_close(adapter.close)
    return [(sim_family(adapter), submit_intent())]


__all__ = ["ServeContext", "Served", "Submit", "load", "load_items", "sim_families"]
