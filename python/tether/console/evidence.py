"""What the console shows of one parked decision: the evidence document the catalog's current
revision references (`tether.operator.decisions.show`), laid out per joint, and what changed
since the previous revision the console showed.

Nothing here decides anything: the document and its revision are the catalog's, the recorded
`changes` are the adapter's (`changed_since`, through `refresh_evidence`); the per-joint
difference only compares two documents for the operator's eyes.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Any, Final

#: Per-joint fields compared between two revisions, and the smallest change shown (radians).
COMPARED: Final = ("position_rad", "goal_rad", "torque_on", "moving", "staged_write")
POSITION_EPS_RAD: Final = 1e-4
#: Evidence documents kept to compare with (Activities x revisions).
KEEP_KEYS: Final = 1024
KEEP_REVISIONS: Final = 4


def _now_ms() -> int:
    return int(time.time() * 1000)


def _deg(rad: object) -> float | None:
    return round(math.degrees(rad), 3) if isinstance(rad, int | float) else None


def _read_back(evidence: dict[str, Any]) -> dict[str, Any]:
    back = evidence.get("read_back") or evidence.get("device_state") or {}
    return back if isinstance(back, dict) else {}


def joints(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Commanded against present per joint (radians and degrees), torque, motion, errors."""
    back = _read_back(evidence).get("joints") or {}
    staged = evidence.get("staged") or {}
    commanded_doc = evidence.get("commanded_vs_present") or {}
    targets = (evidence.get("command") or {}).get("targets") or {}
    out = []
    for name in sorted(set(back) | set(staged) | set(targets)):
        j = back.get(name) or {}
        commanded = (commanded_doc.get(name) or {}).get("commanded_rad")
        if commanded is None:
            commanded = staged.get(name, targets.get(name))
        present = j.get("position_rad")
        out.append(
            {
                "name": name,
                "commanded_rad": commanded,
                "commanded_deg": _deg(commanded),
                "present_rad": present,
                "present_deg": _deg(present),
                "goal_rad": j.get("goal_rad"),
                "goal_deg": _deg(j.get("goal_rad")),
                "error_rad": None
                if not isinstance(commanded, int | float) or not isinstance(present, int | float)
                else round(commanded - present, 6),
                "torque_on": j.get("torque_on"),
                "moving": j.get("moving"),
                "staged_write": j.get("staged_write"),
                "hardware_errors": list(j.get("hardware_errors") or []),
            }
        )
    return out


def sent(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """What was staged and sent, and when (one line per journaled command)."""
    out = []
    for s in evidence.get("sent") or []:
        if isinstance(s, dict):
            out.append(
                {
                    k: s.get(k)
                    for k in ("attempt", "t_ms", "instruction", "joint", "cause", "id")
                    if s.get(k) is not None
                }
            )
    return out


def difference(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Per joint, each compared field whose value differs between two evidence documents."""
    b = {j["name"]: j for j in joints(before)}
    a = {j["name"]: j for j in joints(after)}
    out = []
    for name in sorted(set(a) | set(b)):
        jb, ja = b.get(name, {}), a.get(name, {})
        back_b = (_read_back(before).get("joints") or {}).get(name) or {}
        back_a = (_read_back(after).get("joints") or {}).get(name) or {}
        for field in COMPARED:
            vb, va = back_b.get(field), back_a.get(field)
            if isinstance(vb, int | float) and isinstance(va, int | float):
                if isinstance(vb, bool) or isinstance(va, bool):
                    if vb == va:
                        continue
                elif abs(va - vb) < POSITION_EPS_RAD:
                    continue
            elif vb == va:
                continue
            out.append({"joint": name, "field": field, "before": vb, "after": va})
        if jb.get("hardware_errors") != ja.get("hardware_errors"):
            out.append(
                {
                    "joint": name,
                    "field": "hardware_errors",
                    "before": jb.get("hardware_errors"),
                    "after": ja.get("hardware_errors"),
                }
            )
    return out


class Seen:
    """The evidence documents the console has shown, by Activity and revision (bounded)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: OrderedDict[str, OrderedDict[int, dict[str, Any]]] = OrderedDict()

    def keep(self, key: str, revision: int, evidence: dict[str, Any]) -> None:
        with self._lock:
            revs = self._docs.setdefault(key, OrderedDict())
            revs[revision] = evidence
            self._docs.move_to_end(key)
            while len(revs) > KEEP_REVISIONS:
                revs.popitem(last=False)
            while len(self._docs) > KEEP_KEYS:
                self._docs.popitem(last=False)

    def before(self, key: str, revision: int) -> tuple[int, dict[str, Any]] | None:
        """The latest document shown for `key` under a revision older than `revision`."""
        with self._lock:
            revs: dict[int, dict[str, Any]] = dict(self._docs.get(key) or {})
            older = [r for r in revs if r < revision]
            return None if not older else (max(older), revs[max(older)])

    def at(self, key: str, revision: int) -> dict[str, Any] | None:
        with self._lock:
            revs: dict[int, dict[str, Any]] = dict(self._docs.get(key) or {})
            return revs.get(revision)


def view(shown: dict[str, Any], seen: Seen, *, max_age_s: float) -> dict[str, Any]:
    """The console's view of one `decisions.show` document (see the module doc)."""
    evidence = shown.get("evidence") or {}
    revision = int(shown.get("revision") or 0)
    back = _read_back(evidence)
    read_at = back.get("read_at_ms")
    previous = seen.before(shown["key"], revision)
    seen.keep(shown["key"], revision, evidence)
    age_ms = shown.get("device_state_age_ms")
    if not isinstance(age_ms, int):
        age_ms = shown.get("evidence_age_ms")
    return {
        "key": shown["key"],
        "kind": shown.get("kind"),
        "operation_id": shown.get("operation_id"),
        "revision": revision,
        "reason": shown.get("reason"),
        "robot": back.get("robot") or (evidence.get("command") or {}).get("robot"),
        "read_at_ms": read_at if isinstance(read_at, int) else None,
        "read_back_age_ms": age_ms,
        "evidence_age_ms": shown.get("evidence_age_ms"),
        "too_old": isinstance(age_ms, int) and age_ms > max_age_s * 1000,
        "joints": joints(evidence),
        "sent": sent(evidence),
        "hardware_errors": evidence.get("hardware_errors") or {},
        "command": evidence.get("command"),
        "changes": list(evidence.get("changes") or []),
        "since_previous": None
        if previous is None
        else {"revision": previous[0], "fields": difference(previous[1], evidence)},
        "refusal": shown.get("refusal"),
        "server_ms": _now_ms(),
    }


__all__ = ["Seen", "difference", "joints", "sent", "view"]
