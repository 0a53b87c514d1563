"""The demo's arm planner: it submits the arm's moves to the daemon (`tether.client`, over the
daemon's control socket), follows each until it settles, and walks the operator path for a move
that parks awaiting a decision.

The operator path: the evidence (`operator_show`: per joint commanded vs present in radians,
what was staged and sent, decoded hardware errors, its age), then a decision sent with the
operator's credential to the daemon's `operator_resolve`, which verifies the credential
against its own host.toml and records the operator that credential belongs to. A re-issue then
runs on the adapter's proof (taken by the daemon, which owns the port). `Operator` decides:
`Prompt` asks on the terminal, `Auto` decides unattended (emulated ports only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from tether._args import duration
from tether.client import Client, ClientError

#: Decisions the demo offers for a parked move.
CHOICES = ("reissue", "abandon", "wait")
#: Wrong credentials the prompt accepts before it leaves the move parked.
MAX_TRIES = 3


@dataclass
class MoveOutcome:
    """What became of one move (the summary's row)."""

    activity: str
    key: str
    target: dict[str, float]
    state: str = "not submitted"
    attempts: int = 0
    outcome: str | None = None
    reason: str | None = None
    actions: int = 0
    decision: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "activity": self.activity,
            "key": self.key,
            "target_rad": self.target,
            "state": self.state,
            "attempts": self.attempts,
            "outcome": self.outcome,
            "parked_reason": self.reason,
            "actions": self.actions,
            "decision": self.decision,
        }


class Operator(Protocol):
    """Who decides on a parked move. `decide` returns a decision and the credential (None:
    leave it parked); `refused` is told what the daemon refused."""

    name: str
    mode: str

    def decide(
        self,
        view: dict[str, Any],
        shown: dict[str, Any],
        *,
        parked: Callable[[], bool] | None = None,
    ) -> tuple[str, str] | str | None: ...

    def refused(self, code: str, message: str) -> bool:
        """Whether to try again after the daemon refused the decision."""
        ...


@dataclass
class Auto:
    """`--operator auto-reissue|auto-abandon`: decides unattended with the demo's generated
    credential (held in memory only)."""

    name: str
    mode: str
    secret: str = field(repr=False)
    tries: int = 0

    def decide(
        self,
        view: dict[str, Any],
        shown: dict[str, Any],
        *,
        parked: Callable[[], bool] | None = None,
    ) -> tuple[str, str] | str | None:
        self.tries += 1
        return self.mode.removeprefix("auto-"), self.secret

    def refused(self, code: str, message: str) -> bool:
        return code == "state_changed" and self.tries < MAX_TRIES  # decide on the new revision


def _rad(value: object) -> str:
    return "     -   " if not isinstance(value, int | float) else f"{value:+.4f}"


def evidence_lines(shown: dict[str, Any]) -> list[str]:
    """The parked move's evidence as an operator reads it (radians, decoded errors, age)."""
    doc = shown.get("evidence") or {}
    lines = [
        f"parked: {shown.get('key')}",
        f"  reason {shown.get('reason')}, evidence revision {shown.get('revision')}, "
        f"read {duration(shown.get('evidence_age_ms') or 0)} ago",
        "  joint       commanded rad  goal rad   present rad",
    ]
    for name, j in sorted((doc.get("commanded_vs_present") or {}).items()):
        lines.append(
            f"  {name:<10}  {_rad(j.get('commanded_rad')):>12}  {_rad(j.get('goal_rad')):>9}  "
            f"{_rad(j.get('present_rad')):>11}"
        )
    joints = (doc.get("read_back") or {}).get("joints") or {}
    torque = ", ".join(
        f"{n} {'on' if j.get('torque_on') else 'off'}" for n, j in sorted(joints.items())
    )
    if torque:
        lines.append(f"  torque: {torque}")
    # The evidence's `staged` is the move's commanded goal, written or not: said as the
    # targets (as `tether operator show` says them). "staged:" read as a REG_WRITE still
    # pending on the servos, which an ACTION could execute, after a power loss cleared them.
    staged = doc.get("staged") or {}
    if staged:
        lines.append(
            "  the move's targets: "
            + ", ".join(f"{n} {_rad(v).strip()} rad" for n, v in sorted(staged.items()))
        )
    sent = doc.get("sent") or []
    if sent:
        kinds: dict[str, int] = {}
        for s in sent:
            label = str(s.get("instruction"))
            if s.get("cause"):
                label += f" ({s['cause']})"
            kinds[label] = kinds.get(label, 0) + 1
        lines.append("  sent: " + ", ".join(f"{k} x{n}" for k, n in kinds.items()))
    errors = doc.get("hardware_errors") or {}
    lines.append(
        "  hardware errors: "
        + (
            "; ".join(f"{n}: {', '.join(map(str, e))}" for n, e in sorted(errors.items()))
            if errors
            else "none"
        )
    )
    return lines


#: What a prompt answers when the move was decided elsewhere while it asked.
ELSEWHERE = "\x00elsewhere"


class Prompt:
    """On a terminal: shows the evidence, asks for the decision and the credential."""

    mode = "ask"

    def __init__(
        self,
        name: str,
        out: TextIO,
        read_line: Callable[[str, Callable[[], bool]], str],
        read_secret: Callable[[str], str],
        *,
        who: str | None = None,
    ) -> None:
        self.name = name
        self._who = who or f"operator {name}"
        self._out = out
        self._read_line = read_line
        self._read_secret = read_secret
        self.tries = 0

    def decide(
        self,
        view: dict[str, Any],
        shown: dict[str, Any],
        *,
        parked: Callable[[], bool] | None = None,
    ) -> tuple[str, str] | str | None:
        for line in evidence_lines(shown):
            print(line, file=self._out)
        print(
            "  reissue: run the move again on the adapter's proof that the first attempt can no "
            "longer act; abandon: record it failed; wait: leave it parked",
            file=self._out,
            flush=True,
        )

        def elsewhere() -> bool:
            return parked is not None and not parked()

        while True:
            answer = self._read_line(f"decision [{'/'.join(CHOICES)}]: ", elsewhere)
            if answer == ELSEWHERE:
                print(
                    "\n  decided elsewhere (the operator console or `tether operator`)",
                    file=self._out,
                    flush=True,
                )
                return ELSEWHERE
            answer = answer.strip().lower()
            if answer in CHOICES:
                break
            print(f"  answer one of {', '.join(CHOICES)}", file=self._out, flush=True)
        if answer == "wait":
            return None
        self.tries += 1
        return answer, self._read_secret(f"credential of {self._who}: ")

    def refused(self, code: str, message: str) -> bool:
        print(f"  refused by the daemon: {code}: {message}", file=self._out, flush=True)
        return self.tries < MAX_TRIES


class ArmPlanner:
    """Submits the moves one after another (each idempotent per activity id), in a thread."""

    def __init__(
        self,
        client: Client,
        moves: list[MoveOutcome],
        operator: Operator,
        *,
        world: str,
        kind: str,
        robot: str,
        actions: Callable[[dict[str, float]], int],
        on_existing: Callable[[str], None],
        pause: Callable[[], Any],
        say: Callable[[str], None],
    ) -> None:
        self.client = client
        self.moves = moves
        self.operator = operator
        self.world, self.kind, self.robot = world, kind, robot
        self._actions = actions
        self._on_existing = on_existing
        self._pause = pause
        self._say = say
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name="demo-arm-planner", daemon=True)

    def start(self) -> ArmPlanner:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            for move in self.moves:
                if self.stop.is_set():
                    return
                self._one(move)
                if move.state not in ("done", "failed"):
                    return  # left parked (or interrupted): the arm's state is the operator's
        except ClientError as exc:
            if not self.stop.is_set():
                self.error = f"{exc.code}: {exc.message}"
        finally:
            self.done.set()

    def _follow(self, key: str) -> dict[str, Any]:
        while True:
            views = list(self.client.watch(key, timeout=5))
            view = views[-1] if views else self.client.get(key)
            if view.get("final") or self.stop.is_set():
                return view

    def _record(self, move: MoveOutcome, view: dict[str, Any]) -> None:
        move.state = str(view.get("state"))
        move.attempts = int(view.get("attempts") or 0)
        move.outcome = (view.get("result") or {}).get("outcome")
        move.reason = view.get("reason") if move.state == "awaiting_decision" else move.reason
        move.actions = self._actions(move.target)

    def _one(self, move: MoveOutcome) -> None:
        request = {"robot": self.robot, "targets": move.target}
        view = self.client.submit(self.world, move.activity, self.kind, request)
        if not view.get("created"):
            self._on_existing(move.activity)
        self._record(move, view)
        view = self._follow(move.key)
        self._record(move, view)
        while view.get("state") == "awaiting_decision" and not self.stop.is_set():
            decided = self._decide(move, view)
            if decided is None:
                return
            move.decision = decided
            view = self._follow(move.key)
            self._record(move, view)

    def _parked(self, move: MoveOutcome) -> bool:
        try:
            return self.client.get(move.key).get("state") == "awaiting_decision"
        except ClientError:
            return True  # cannot tell: keep asking

    def _decide(self, move: MoveOutcome, view: dict[str, Any]) -> dict[str, Any] | None:
        """One decision through the daemon (None: left parked)."""
        with self._pause():
            while True:
                shown = self.client.request({"op": "operator_show", "id": move.key})
                chosen = self.operator.decide(view, shown, parked=lambda: self._parked(move))
                if chosen == ELSEWHERE:  # the console's page (or the CLI) decided it
                    return {"decision": "elsewhere", "mode": "console"}
                if chosen is None:
                    move.decision = {"decision": "wait", "operator": self.operator.name}
                    return None
                assert isinstance(chosen, tuple)
                decision, secret = chosen
                try:
                    made = self.client.request(
                        {
                            "op": "operator_resolve",
                            "id": move.key,
                            "decision": decision,
                            "revision": shown.get("revision"),
                            "credential": secret,
                            "note": f"tether demo ({self.operator.mode})",
                        }
                    )
                except ClientError as exc:
                    if self.operator.refused(exc.code, exc.message):
                        continue
                    move.decision = {"decision": None, "refused": exc.code}
                    return None
                self._say(
                    f"{move.activity}: {made['decision']} by operator {made['operator']} on "
                    f"evidence revision {made['revision']}"
                )
                return {
                    "decision": made["decision"],
                    "operator": made["operator"],
                    "revision": made["revision"],
                    "decided_at_ms": made.get("decided_at_ms"),
                    "mode": self.operator.mode,
                }


def wait_done(planner: ArmPlanner | None, timeout: float) -> bool:
    """Whether the planner finished within `timeout` s."""
    if planner is None:
        return True
    deadline = time.monotonic() + timeout
    while not planner.done.is_set() and time.monotonic() < deadline:
        planner.done.wait(0.05)
    return planner.done.is_set()


__all__ = ["CHOICES", "ArmPlanner", "Auto", "MoveOutcome", "Operator", "Prompt", "evidence_lines"]
