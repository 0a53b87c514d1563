"""An Activity's device trace: one readable line per fact of the operations journal and the
catalog, append-only, for the tool call's output (`LivePublisher.tool_output`).

The facts, each one line, in time order:

- from the catalog record (`ActivityRecord`): admission, the provider operation bound, each
  attempt claimed (a "catalog attempt": every claim counts, a reconcile-only one too, so its
  number is not the journal's), a confirmed absence (retry guard), each evidence revision
  (an Unknown reconciliation parked for an operator), each operator decision, the result
  recorded and the settlement;
- from the journal (`tether.operations.Operation`, its public read API only): the binding and
  its request, each attempt started (the operation's own count of the attempts that began;
  its start line names the catalog attempt and fence that ran it) or fenced out, each
  pre-image (the read-back before the
  attempt acted), every command of the append-only sent log, the proofs behind retry guards
  (reconciliation's conclusions: a confirmed absence, a re-issue), the published result.

Units: the generic wording shows strings, booleans and the numbers whose key names their SI
unit (``goal_rad`` is "goal=0.785398 rad", ``speed_rad_s`` "speed=0.5 rad/s"); a bare number
(a raw register value, ticks) is never shown, since its unit is unknown here. A family that wants
its own wording for a fact passes a `Wording` (by kind, to `trace_lines`): it gets the fact and
returns the line, or None for the generic one.

The trace is append-only, so its offsets hold: `TraceLog` keeps the facts it has written (by a
stable key) and appends only new ones, whatever order later reads find them in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.activities import DECISION_WORDS, ActivityRecord, Receipt
from tether.operations import JournalError, Operation

__all__ = [
    "Fact",
    "TraceLine",
    "TraceLog",
    "Wording",
    "catalog_lines",
    "journal_lines",
    "render_fields",
    "trace_lines",
]

#: SI unit suffixes of field names, longest first, and how a line writes them.
UNITS: tuple[tuple[str, str], ...] = (
    ("_rad_s2", "rad/s²"),
    ("_rad_s", "rad/s"),
    ("_rad", "rad"),
    ("_m_s", "m/s"),
    ("_m", "m"),
    ("_n_m", "N·m"),
    ("_n", "N"),
    ("_s", "s"),
    ("_bytes", "B"),
)
#: Bare numbers that are counts or identifiers, not measurements: shown as they are.
COUNTS = frozenset(
    {"attempt", "catalog_attempt", "id", "fence", "for_attempt", "fence_floor", "size", "sent"}
)
#: Fields a line never shows: times (the line's order carries them), digests, raw documents.
HIDDEN = frozenset({"t_ms", "digest", "request_digest", "owner_pid", "port_lock"})


@dataclass(frozen=True)
class Fact:
    """One fact a `Wording` may word: ``what`` names it (``request``, ``attempt``,
    ``preimage``, ``sent``, ``proof``, ``fenced``, ``result``), ``attempt`` its attempt (0 when
    none), ``doc`` the journal document as read."""

    what: str
    attempt: int
    doc: Mapping[str, Any]


#: A family's wording hook: the line for a fact, or None for the generic wording.
Wording = Callable[[Fact], str | None]


@dataclass(frozen=True)
class TraceLine:
    """One line of a trace: ``key`` identifies its fact (stable across reads), ``at_ms`` orders
    it (None: right after the line before it in its source), ``text`` has no line break."""

    key: str
    at_ms: int | None
    text: str


def _number(value: float) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _unit(name: str) -> tuple[str, str] | None:
    for suffix, unit in UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], unit
    return None


def _leaves(doc: Any, path: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], Any]]:
    if isinstance(doc, Mapping):
        for k in doc:
            yield from _leaves(doc[k], (*path, str(k)))
    elif isinstance(doc, list):
        if all(isinstance(v, str | bool) for v in doc):
            yield path, ",".join(_scalar(v) for v in doc) or "none"
    else:
        yield path, doc


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_fields(doc: Mapping[str, Any], *, skip: Iterable[str] = ()) -> str:
    """``name=value`` for each leaf of `doc` a line may show (see the module docstring), space
    separated, nested names joined by ``.``; `skip` leaves out top-level fields."""
    skipped = set(skip) | HIDDEN
    out: list[str] = []
    for path, value in _leaves({k: v for k, v in doc.items() if k not in skipped}, ()):
        if not path or path[-1] in HIDDEN or value is None:
            continue
        name = ".".join(path)
        if isinstance(value, bool | str):
            text = _scalar(value).replace("\n", " ")
            out.append(f"{name}={text}")
        elif isinstance(value, int | float):
            unit = _unit(path[-1])
            if unit is not None:
                out.append(f"{'.'.join((*path[:-1], unit[0]))}={_number(value)} {unit[1]}")
            elif path[-1] in COUNTS:
                out.append(f"{name}={value}")
    return " ".join(out)


def _line(head: str, fields: str) -> str:
    return f"{head}: {fields}" if fields else head


def _tick(r: Receipt) -> str:
    return f"tick {r.tick} of run {r.run_id}"


def catalog_lines(record: ActivityRecord) -> list[TraceLine]:
    """The catalog's facts of one Activity, as the record shows them now."""
    r = record
    out = [TraceLine("admitted", r.admitted_at_ms, f"admitted by {_tick(r.source)}")]
    if r.operation_id is not None:
        out.append(
            TraceLine(
                "operation",
                r.operation_bound_at_ms,
                f"provider operation {r.operation_id} bound",
            )
        )
    if r.attempt is not None:
        a = r.attempt
        how = "to execute" if a.may_execute else "to reconcile only"
        out.append(
            TraceLine(
                f"claim:{a.number}",
                None,
                f"catalog attempt {a.number} claimed {how} (fence {a.fence})",
            )
        )
    if r.retry_guard is not None:
        g = r.retry_guard
        out.append(
            TraceLine(
                f"guard:{g.fence}",
                g.recorded_at_ms,
                f"reconciled: absence confirmed, retry guard {g.guard.ref} (fence {g.fence})",
            )
        )
    if r.evidence is not None and r.evidence_revision > 0:
        n = r.evidence_revision
        waiting = ", awaiting an operator decision" if r.awaiting_decision else ""
        out.append(
            TraceLine(
                f"evidence:{n}",
                r.evidence.recorded_at_ms,
                f"reconciled: outcome unknown, evidence revision {n} {r.evidence.evidence.ref}"
                + waiting,
            )
        )
    if r.decision is not None:
        d = r.decision
        note = f" ({d.note})" if d.note else ""
        out.append(
            TraceLine(
                f"decision:{d.evidence_revision}",
                d.decided_at_ms,
                f"operator {d.operator} decided {DECISION_WORDS.get(d.outcome, d.outcome)} on"
                f" evidence revision {d.evidence_revision}{note}",
            )
        )
    if r.recorded_result is not None:
        rr = r.recorded_result
        by = "an operator decision" if rr.attempt == 0 else f"catalog attempt {rr.attempt}"
        failed = "failed result" if rr.result.failed else "result"
        out.append(
            TraceLine(
                "result",
                rr.recorded_at_ms,
                f"{failed} recorded by {by}: {rr.result.media_type}, {rr.result.size} B",
            )
        )
    if r.settlement is not None:
        s = r.settlement
        out.append(
            TraceLine("settled", s.settled_at_ms, f"settled, observed by {_tick(s.receipt)}")
        )
    return [TraceLine(x.key, x.at_ms, x.text.replace("\n", " ")) for x in out]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def journal_lines(op: Operation, wording: Wording | None = None) -> list[TraceLine]:
    """The journal's facts of one provider operation (its public read API only)."""

    def word(fact: Fact, generic: str) -> str:
        text = wording(fact) if wording is not None else None
        return (generic if text is None else text).replace("\n", " ")

    bound = op.bound
    request = bound.get("request")
    req = request if isinstance(request, Mapping) else {}
    out = [
        TraceLine(
            "bound",
            _int(bound.get("bound_at_ms")),
            word(
                Fact("request", 0, req),
                _line(f"operation {op.id} bound to its request", render_fields(req)),
            ),
        )
    ]
    sent_by: dict[int, list[tuple[int, TraceLine]]] = {}
    for i, rec in enumerate(op.sent()):
        attempt = _int(rec.get("attempt")) or 0
        cause = rec.get("cause")
        what = f"safe-stop ({cause})" if cause else str(rec.get("instruction", "command"))
        generic = _line(
            f"attempt {attempt} sent {what}",
            render_fields(rec, skip=("attempt", "instruction", "cause")),
        )
        line = TraceLine(
            f"sent:{i}", _int(rec.get("t_ms")), word(Fact("sent", attempt, rec), generic)
        )
        sent_by.setdefault(attempt, []).append((i, line))
    for n in op.attempts():
        marker = op.marker(n) or {}
        out.append(
            TraceLine(
                f"start:{n}",
                _int(marker.get("started_at_ms")),
                word(
                    Fact("attempt", n, marker),
                    _line(
                        f"attempt {n} started",
                        render_fields(marker, skip=("attempt", "started_at_ms")),
                    ),
                ),
            )
        )
        pre = op.preimage(n)
        sends = sent_by.pop(n, [])
        # The pre-image goes where it was read among the attempt's commands (a journal that
        # does not say where: before them).
        at = op.preimage_position(n) if pre is not None else None
        out.extend(line for i, line in sends if at is not None and i < at)
        if pre is not None:
            out.append(
                TraceLine(
                    f"preimage:{n}",
                    None,
                    word(
                        Fact("preimage", n, pre),
                        _line(f"attempt {n} read back its pre-image", render_fields(pre)),
                    ),
                )
            )
        out.extend(line for i, line in sends if at is None or i >= at)
        if op.fenced(n):
            out.append(
                TraceLine(
                    f"fenced:{n}", None, word(Fact("fenced", n, {}), f"attempt {n} fenced out")
                )
            )
    for lines in sent_by.values():  # commands of an attempt without a start marker (a proof's)
        out.extend(line for _, line in lines)
    for name in op.proofs():
        try:
            proof = op.proof(name)
        except (JournalError, ValueError):
            continue
        if proof is None:
            continue
        attempt = _int(proof.get("for_attempt")) or 0
        out.append(
            TraceLine(
                f"proof:{name}",
                _int(proof.get("recorded_at_ms")),
                word(
                    Fact("proof", attempt, proof),
                    _line(f"proof {name} recorded", render_fields(proof, skip=("proof",))),
                ),
            )
        )
    pointer = op.result()
    if pointer is not None:
        inline = pointer.get("inline")
        doc = inline if isinstance(inline, Mapping) else pointer
        head = "failed result published" if pointer.get("failed") else "result published"
        out.append(
            TraceLine(
                "published",
                None,
                word(
                    Fact("result", _int(doc.get("attempt")) or 0, doc),
                    _line(head, render_fields(doc)),
                ),
            )
        )
    return out


def _merge(*sources: list[TraceLine]) -> list[TraceLine]:
    """The lines of every source in time order; a line without a time keeps its place after
    the line before it in its own source."""
    keyed: list[tuple[int, int, int, TraceLine]] = []
    for s, lines in enumerate(sources):
        last = 0
        for i, line in enumerate(lines):
            last = line.at_ms if line.at_ms is not None else last
            keyed.append((last, s, i, line))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed]


def trace_lines(
    record: ActivityRecord,
    operation: Operation | None,
    *,
    wordings: Mapping[str, Wording] | None = None,
) -> list[TraceLine]:
    """Every fact of one Activity, in time order: its catalog record's and, when it has one,
    its journal operation's (worded by ``wordings[record.key.kind]`` when given)."""
    journal = (
        [] if operation is None else journal_lines(operation, (wordings or {}).get(record.key.kind))
    )
    return _merge(
        catalog_lines(record), [TraceLine("j:" + x.key, x.at_ms, x.text) for x in journal]
    )


class TraceLog:
    """One Activity's trace text, append-only: a fact once written stays where it is; `update`
    appends the facts not written yet, in the order given. Not thread-safe."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._parts: list[str] = []
        self._size = 0

    @property
    def text(self) -> str:
        """The whole trace so far."""
        return "".join(self._parts)

    @property
    def lines(self) -> int:
        """How many lines were written."""
        return len(self._keys)

    def update(self, lines: Iterable[TraceLine]) -> str:
        """Append the lines whose facts are new; returns the text appended ("" when none)."""
        new = []
        for line in lines:
            if line.key not in self._keys:
                self._keys.add(line.key)
                new.append(line.text + "\n")
        text = "".join(new)
        if text:
            self._parts.append(text)
        return text
