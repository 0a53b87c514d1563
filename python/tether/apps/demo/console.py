"""Terminal output of the demo: one live progress bar per activity and the final summary table."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

_BAR = 24


@dataclass
class ActivityRow:
    """What the terminal knows about one activity."""

    activity: str
    attempt: int = 0
    done: int = 0
    total: int = 0
    error: float | None = None
    #: The unit of `error`: metres for a reach (distance to the target), radians for an arm
    #: move (the largest joint's distance to its goal).
    unit: str = "m"
    state: str = "admitted"


@dataclass(frozen=True)
class SummaryRow:
    """One line of the final summary table."""

    activity: str
    attempts: int
    result_digest: str
    source_tick: int
    settle_tick: int | None
    seconds: float
    recovered: str


def progress_line(row: ActivityRow) -> str:
    """`reach-0001 [######------] 1200/2000 err 0.0123 m attempt 1 running` (an arm move:
    `err 0.2100 rad`)."""
    frac = row.done / row.total if row.total else (1.0 if row.state == "settled" else 0.0)
    filled = round(_BAR * min(max(frac, 0.0), 1.0))
    err = "   -    " if row.error is None else f"{row.error:.4f}"
    return (
        f"{row.activity:<12} [{'#' * filled}{'-' * (_BAR - filled)}] "
        f"{row.done:>8}/{row.total:<8} err {err} {row.unit:<3} attempt {row.attempt}  {row.state}"
    )


def summary_table(rows: list[SummaryRow]) -> str:
    """The final table: activity, attempts, result digest, source/settle ticks, time, recovery."""
    head = ("activity", "attempts", "result digest", "source", "settled", "time s", "recovered")
    body = [
        (
            r.activity,
            str(r.attempts),
            r.result_digest.removeprefix("sha256:")[:16],
            str(r.source_tick),
            "-" if r.settle_tick is None else str(r.settle_tick),
            f"{r.seconds:.2f}",
            r.recovered,
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


class ProgressBoard:
    """Live progress of every activity; redraws in place on a TTY, prints milestones otherwise.

    Thread-safe: workers report from their own threads.
    """

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._tty = self._out.isatty()
        self._rows: dict[str, ActivityRow] = {}
        self._drawn = 0
        self._milestone: dict[str, int] = {}
        self._lock = threading.Lock()
        self._paused = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No drawing while the block runs (an operator prompt owns the terminal); updates are
        kept, and the board is drawn again after it. Never blocks the threads that report."""
        with self._lock:
            if self._tty and self._drawn:
                self._out.write(f"\x1b[{self._drawn}F\x1b[J")
                self._out.flush()
            self._drawn = 0
            self._paused = True
        try:
            yield
        finally:
            with self._lock:
                self._paused = False
                if self._tty:
                    self._redraw()

    def update(self, activity: str, **changes: object) -> None:
        """Change fields of an activity's row (creating it) and show the result."""
        with self._lock:
            row = self._rows.setdefault(activity, ActivityRow(activity))
            for name, value in changes.items():
                setattr(row, name, value)
            if self._paused:
                return
            if self._tty:
                self._redraw()
            else:
                self._milestones(row)

    def message(self, text: str) -> None:
        """Print a line above the live board."""
        with self._lock:
            if self._tty and self._drawn:
                self._out.write(f"\x1b[{self._drawn}F\x1b[J")
                self._drawn = 0
            self._out.write(text + "\n")
            if self._tty and not self._paused:
                self._redraw()
            self._out.flush()

    def _redraw(self) -> None:
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}F")
        for row in self._rows.values():
            self._out.write("\x1b[2K" + progress_line(row) + "\n")
        self._drawn = len(self._rows)
        self._out.flush()

    def _milestones(self, row: ActivityRow) -> None:
        # Without a TTY print each quarter of progress and each state change once.
        quarter = 4 * row.done // row.total if row.total else 0
        key = hash((quarter, row.state, row.attempt))
        if self._milestone.get(row.activity) != key:
            self._milestone[row.activity] = key
            self._out.write(progress_line(row) + "\n")
            self._out.flush()
