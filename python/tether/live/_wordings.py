"""Families' own wording of their journal facts in a trace (`tether.live._trace.Wording`).

Only what a family's documents say in SI units already is worded here (no device codec is
imported): a robot move's request targets and its result's goals and final positions are
radians by the family's contract. Everything else keeps the generic wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.families.robot_move.request import KIND_RELATIVE, KINDS
from tether.live._trace import Fact, Wording

__all__ = ["DEFAULT_WORDINGS", "robot_move_wording"]


def _joints_rad(doc: Any) -> str:
    if not isinstance(doc, Mapping):
        return ""
    return " ".join(
        f"{name}={value:.6g} rad"
        for name, value in sorted(doc.items())
        if isinstance(value, int | float) and not isinstance(value, bool)
    )


#: The stops a `concluded-N` record says counted, in words.
_STOPS = (("operator_stop", "an operator's stop"), ("shutdown_stop", "the host's shutdown stop"))


def robot_move_wording(fact: Fact) -> str | None:
    """A robot move's request ("move arm to shoulder=0.5 rad ..."), result (its outcome,
    goals and final positions) and first Unknown conclusion (`concluded-N`: from then on no
    later stop is its cause); None (the generic wording) for every other fact."""
    doc = fact.doc
    if fact.what == "request":
        how = "by" if doc.get("kind") == KIND_RELATIVE else "to"
        return f"move {doc.get('robot')} {how} {_joints_rad(doc.get('targets'))}".rstrip()
    if fact.what == "result" and "final" in doc:
        return (
            f"attempt {fact.attempt} result {doc.get('outcome')}: goals "
            f"{_joints_rad(doc.get('goals'))}; final {_joints_rad(doc.get('final'))}"
        )
    if fact.what == "proof" and str(doc.get("proof", "")).startswith("concluded-"):
        stops = [w for k, w in _STOPS if doc.get(k) is True]
        cut = f", cut short by {' and '.join(stops)}" if stops else ""
        why = doc.get("reason")
        return f"attempt {fact.attempt} first reconciled: outcome unknown ({why}){cut}"
    return None


#: The wordings `LiveFeed` uses unless given others, by Activity kind.
DEFAULT_WORDINGS: Mapping[str, Wording] = dict.fromkeys(KINDS, robot_move_wording)
