"""Benchmark: validating and applying live events, against Python `jsonschema` on the same events.

20,000 events of a realistic live session (tool-output appends at byte offsets with multibyte
text, payloadSet/payloadUnset, status updates, turn and interaction updates), as JSON bytes,
timed two ways in one process:

- Tether: `LiveOverlay.apply(bytes)`: strict JSON reading, every schema rule and every
  Tether-only rule, and the application to the overlay, all in Rust;
- baseline: `json.loads` + `jsonschema.Draft202012Validator.is_valid` over the seed's schema
  with Tether's definitions (validation only: no application).

Target: Tether >= 20x the baseline. Run: `make bench` or
`.venv/bin/python benches/live_events.py [--events N] [--repeat R]`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import jsonschema
from tether.live import LiveOverlay, event_schema, schema_registry

WS, SESSION = "ws", "world-1"
MESSAGES = 50
TEXT = "joint 2 → 41.5° ✓ read-back ok\n"


def env(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"workspaceId": WS, "agentSessionId": SESSION, "eventType": event_type, "data": data}


def events(n: int) -> list[bytes]:
    out: list[bytes] = []
    offsets = [0] * MESSAGES
    turn = f"receipt:{SESSION}/run-1/3/tok-3"
    t = {
        "turnId": turn,
        "agentSessionId": SESSION,
        "phase": "running",
        "outcome": None,
        "error": None,
        "startedAtUnixMs": 1,
        "settledAtUnixMs": None,
        "updatedAtUnixMs": 2,
    }
    head = {"workspaceId": WS, "agentSessionId": SESSION}
    for i in range(n):
        m = i % MESSAGES
        mid = f"toolcall:{SESSION}/robot.move/a{m}"
        base = {**head, "messageId": mid, "turnId": turn, "role": "tool", "kind": "tool_call"}
        base["occurredAtUnixMs"] = 1_764_480_000_000 + i
        k = i // MESSAGES
        if k == 0:
            ev = env("message_delta", {**base, "toolOutput": {"operation": "set", "text": TEXT}})
            offsets[m] = len(TEXT.encode())
        elif i % 10 == 7:
            ev = env("message_delta", {**base, "payloadSet": {"step": k, "pose": [0.1, k, 3]}})
        elif i % 10 == 8:
            ev = env("message_delta", {**base, "status": "running", "payloadUnset": ["pose"]})
        elif i % 100 == 99:
            ev = env(
                "turn_update",
                {
                    **head,
                    "eventType": "turn_update",
                    "occurredAtUnixMs": 3 + i,
                    "activeTurnId": turn,
                    "turn": {**t, "updatedAtUnixMs": 3 + i},
                },
            )
        elif i % 100 == 98:
            x = {
                "requestId": f"approval:{SESSION}/robot.move/a{m}/{k}",
                "agentSessionId": SESSION,
                "turnId": turn,
                "kind": "approval",
                "status": "pending",
                "toolName": "robot.move",
                "input": {"activityId": f"a{m}", "evidenceRevision": k},
                "output": None,
                "metadata": {"messageId": mid},
                "createdAtUnixMs": i,
                "updatedAtUnixMs": i,
            }
            data = {**head, "eventType": "interaction_update", "occurredAtUnixMs": 1 + i}
            ev = env("interaction_update", {**data, "interaction": x})
        else:
            op = {"operation": "append_text", "text": TEXT, "offsetBytes": offsets[m]}
            ev = env("message_delta", {**base, "toolOutput": op})
            offsets[m] += len(TEXT.encode())
        out.append(json.dumps(ev, ensure_ascii=False).encode())
    return out


def best_of(repeat: int, run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = events(args.events)
    validator = jsonschema.Draft202012Validator(event_schema(), registry=schema_registry())

    def baseline() -> None:
        for d in data:
            if not validator.is_valid(json.loads(d)):
                raise AssertionError("the baseline refused a valid event")

    def tether() -> None:
        view = LiveOverlay(WS, SESSION)
        for d in data:
            if view.apply(d) not in ("applied", "unchanged"):
                raise AssertionError("an event did not apply")
        assert not view.needs_reconciliation

    base = best_of(args.repeat, baseline)
    ours = best_of(args.repeat, tether)
    n = len(data)
    print(f"events: {n} ({sum(map(len, data)) / n:.0f} B average)")
    print(f"jsonschema (validate only): {n / base:12,.0f} events/s")
    print(f"Tether (validate + apply):  {n / ours:12,.0f} events/s")
    ratio = base / ours
    print(f"ratio: {ratio:.1f}x (target >= 20x)")
    if ratio < 20:
        raise SystemExit("below the 20x target")


if __name__ == "__main__":
    main()
