"""Shared helpers for in-process Host tests: a manual clock, a Host factory, keys, draining."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from journal_provider import KIND, make_family
from tether.activities import ActivityKey
from tether.runtime import Family, Host
from tether.world import CommittedTickReceipt


class Clock:
    """A manual millisecond clock for leases and retry delays."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make_host(tmp_path: Path, *families: Family, clock: Clock | None = None, **kw: Any) -> Host:
    fams = families or (make_family(tmp_path),)
    return Host(tmp_path, fams, workers=0, observe=False, clock=clock or Clock(), **kw)


def akey(i: int, world: str = "w", kind: str = KIND) -> ActivityKey:
    return ActivityKey(world_id=world, kind=kind, activity_id=f"task-{i:04d}")


def drain(host: Host) -> int:
    worker = host.new_worker()
    n = 0
    while worker.run_once():
        n += 1
    worker.close()
    return n


def same(receipt: CommittedTickReceipt, other: Any) -> bool:
    return (receipt.world_id, receipt.run_id, receipt.tick, receipt.visibility_token) == (
        other.world_id,
        other.run_id,
        other.tick,
        other.visibility_token,
    )
