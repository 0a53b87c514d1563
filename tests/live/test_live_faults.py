"""1,000 drops, duplicates and reorders injected on the frames between a publisher and a
subscriber (fixed seed): every fault is detected, and after each reconciliation the overlay
equals the canonical record; whenever the subscriber and the overlay report nothing wrong, the
overlay equals the canonical record at the subscriber's position. Zero silent divergences.

The canonical record is computed here, independently of the Rust overlay, from what the
publisher was asked to publish (the test's own model of the trace cap included).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from tether.live import LiveOverlay, LivePublisher, LiveSubscriber

WS, SESSION, EPOCH = "ws", "world-1", 1
CAP, MARKER = 600, "<cut>"
ALPHABET = "abcxyz é€😀\n"


class Model:
    """The canonical record, maintained from the publisher's inputs."""

    def __init__(self) -> None:
        self.messages: dict[str, dict[str, Any]] = {}
        self.turns: dict[str, dict[str, Any]] = {}
        self.truncated: set[str] = set()

    def message(self, mid: str, tid: str) -> dict[str, Any]:
        return self.messages.setdefault(
            mid, {"turnId": tid, "role": "tool", "kind": "tool_call", "payload": {}}
        )

    def output(self, mid: str, tid: str, text: str) -> None:
        m = self.message(mid, tid)
        out = m["payload"].setdefault("output", {"text": ""})
        if mid in self.truncated:
            return
        room = CAP - len(MARKER.encode()) - len(out["text"].encode())
        if len(text.encode()) <= room:
            out["text"] += text
            return
        kept = ""
        for ch in text:
            if len((kept + ch).encode()) > room:
                break
            kept += ch
        out["text"] += kept + MARKER
        self.truncated.add(mid)

    def record(self) -> str:
        """The record as canonical JSON text (cheaper to keep per frame than a deep copy)."""
        return canonical(
            {
                "workspaceId": WS,
                "agentSessionId": SESSION,
                "runtime": None,
                "turns": self.turns,
                "messages": self.messages,
                "interactions": {},
                "audits": {},
            }
        )


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def turn_event(tid: str, now: int, settled: bool) -> dict[str, Any]:
    t = {
        "turnId": tid,
        "agentSessionId": SESSION,
        "phase": "settled" if settled else "running",
        "outcome": "completed" if settled else None,
        "error": None,
        "startedAtUnixMs": 1,
        "settledAtUnixMs": now if settled else None,
        "updatedAtUnixMs": now,
    }
    return {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "eventType": "turn_update",
        "data": {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "turn_update",
            "occurredAtUnixMs": now,
            "activeTurnId": None if settled else tid,
            "turn": t,
        },
    }


def delta(mid: str, tid: str, now: int, **fields: Any) -> dict[str, Any]:
    data = {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "messageId": mid,
        "turnId": tid,
        "role": "tool",
        "kind": "tool_call",
        "occurredAtUnixMs": now,
        **fields,
    }
    return {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "eventType": "message_delta",
        "data": data,
    }


class Scenario:
    """A publisher driven at random, with the model beside it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pub = LivePublisher(
            WS, SESSION, epoch=EPOCH, max_chunk_bytes=48, max_output_bytes=CAP,
            truncation_marker=MARKER, max_deliveries_per_frame=8,
        )  # fmt: skip
        self.model = Model()
        self.now = 1
        self.turns: list[str] = []
        self.open_messages: dict[str, list[str]] = {}
        self.names = 0
        self.canon: dict[int, str] = {0: self.model.record()}

    def step(self) -> None:
        rng, self.now = self.rng, self.now + 1
        if not self.turns or rng.random() < 0.03:
            tid = f"receipt:{SESSION}/run/{len(self.turns) + 1}/tok"
            self.turns.append(tid)
            self.open_messages[tid] = []
            self.pub.publish(turn_event(tid, self.now, settled=False))
            self.model.turns[tid] = turn_event(tid, self.now, False)["data"]["turn"]
        tid = rng.choice(self.turns[-3:])
        settled = self.model.turns[tid]["phase"] == "settled"
        msgs = self.open_messages[tid]
        if not msgs or rng.random() < 0.05:
            self.names += 1
            msgs.append(f"toolcall:{SESSION}/sim/a{self.names}")
        mid = rng.choice(msgs)
        roll = rng.random()
        if roll < 0.65:
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
            self.pub.tool_output(mid, tid, text, now_ms=self.now)
            self.model.output(mid, tid, text)
        elif roll < 0.85:
            m = self.model.message(mid, tid)
            key = f"k{rng.randint(0, 3)}"
            if key in m["payload"] and rng.random() < 0.5:
                self.pub.publish(delta(mid, tid, self.now, payloadUnset=[key]))
                del m["payload"][key]
            else:
                value = {"n": self.now, "s": rng.choice(ALPHABET)}
                self.pub.publish(delta(mid, tid, self.now, payloadSet={key: value}))
                m["payload"][key] = value
        elif roll < 0.95 and not settled:
            m = self.model.message(mid, tid)
            self.pub.publish(
                delta(mid, tid, self.now, status="completed", completedAtUnixMs=self.now)
            )
            m["status"], m["completedAtUnixMs"] = "completed", self.now
            msgs.remove(mid)
        elif not settled and len(self.turns) > 1 and tid != self.turns[-1]:
            self.pub.publish(turn_event(tid, self.now, settled=True))
            self.model.turns[tid] = turn_event(tid, self.now, True)["data"]["turn"]

    def frame(self, heartbeat: bool = False) -> bytes | None:
        data = self.pub.heartbeat() if heartbeat else self.pub.poll_frame()
        if data is not None:
            self.canon[self.pub.seq] = self.model.record()
        return data


def test_one_thousand_injected_faults_are_all_detected_and_never_diverge_silently() -> None:
    rng = random.Random(15)
    sc = Scenario(rng)
    sub = LiveSubscriber(epoch=EPOCH, seq=0)
    view = LiveOverlay(WS, SESSION)
    injected: Counter[str] = Counter()
    faults: list[tuple[str, int]] = []
    reported_missing: set[int] = set()
    dropped_on_arrival: dict[int, list[str]] = {}
    held: bytes | None = None
    overtaken = False  # a later frame arrived while one was held: a real reorder
    pending_read: tuple[int, str, int] | None = None
    reconciliations = checks = 0

    def seq_of(frame: bytes) -> int:
        return int(json.loads(frame)["seq"])

    def deliver(frame: bytes) -> None:
        nonlocal pending_read, reconciliations, checks
        outcome = sub.handle_frame(frame)
        reported_missing.update(outcome.missing)
        if outcome.fault in ("duplicate", "reorder", "stale", "conflicting_duplicate"):
            dropped_on_arrival.setdefault(outcome.seq, []).append(outcome.fault)
        view.apply_outcome(outcome)
        if pending_read is not None:
            at_seq, record, countdown = pending_read
            if countdown > 0:
                pending_read = (at_seq, record, countdown - 1)
                return
            pending_read = None
            view.reconcile(json.loads(record), replay=sub.resync(EPOCH, at_seq))
            reconciliations += 1
        if sub.needs_reread:
            # The canonical read is as of the newest frame the subscriber has seen (so a frame
            # dropped after it still shows as a gap); sometimes it answers only after a few
            # more frames arrived, which the subscriber kept and `resync` replays.
            at_seq = sub.last_seq
            pending_read = (at_seq, sc.canon[at_seq], rng.choice([0, 0, 0, 1, 2, 3]))
            if pending_read[2] == 0:
                pending_read = None
                view.reconcile(json.loads(sc.canon[at_seq]), replay=sub.resync(EPOCH, at_seq))
                reconciliations += 1
            return
        # Nothing reported wrong: the overlay must be exactly the canonical record.
        assert not view.needs_reconciliation, view.marks
        assert canonical(view.snapshot()) == sc.canon[sub.last_seq], f"diverged at {sub.last_seq}"
        checks += 1

    while sum(injected.values()) < 1000:
        for _ in range(rng.randint(1, 4)):
            sc.step()
        frame = sc.frame(heartbeat=rng.random() < 0.1)
        if frame is None:
            continue
        seq = seq_of(frame)
        roll = rng.random()
        if held is not None and overtaken and rng.random() < 0.7:
            deliver(held)  # the held frame arrives late, after a later one
            held = None
        if roll < 0.15:
            injected["drop"] += 1
            faults.append(("drop", seq))
            continue
        if roll < 0.3:
            injected["duplicate"] += 1
            faults.append(("duplicate", seq))
            deliver(frame)
            overtaken = held is not None
            deliver(frame)
            continue
        if roll < 0.45 and held is None:
            injected["reorder"] += 1
            faults.append(("reorder", seq))
            held, overtaken = frame, False
            continue
        deliver(frame)
        overtaken = held is not None
    if held is not None:
        deliver(sc.frame(heartbeat=True) or b"")
        deliver(held)
    # An idle stream still sends heartbeats: the last drops show as a gap too.
    for _ in range(4):
        deliver(sc.frame(heartbeat=True) or b"")
    while pending_read is not None or sub.needs_reread:
        deliver(sc.frame(heartbeat=True) or b"")

    assert sum(injected.values()) == 1000
    assert min(injected.values()) > 250, injected
    for kind, seq in faults:
        if kind == "drop":
            assert seq in reported_missing, f"undetected drop of frame {seq}"
        elif kind == "duplicate":
            assert dropped_on_arrival.get(seq), f"undetected duplicate of frame {seq}"
        else:
            # A late frame shows as a gap, or arrives after a read that already covers it.
            late = dropped_on_arrival.get(seq, [])
            assert late, f"late frame {seq} was applied as if in order"
            assert seq in reported_missing or "stale" in late, f"reorder of {seq} unnoticed"
    assert canonical(view.snapshot()) == sc.canon[sc.pub.seq]
    assert not view.needs_reconciliation and not sub.needs_reread
    assert reconciliations > 500 and checks > 500
    # The run exercised late deltas (discontinuities), truncation and several turns.
    assert len(sc.model.truncated) > 0
    assert sum(t["phase"] == "settled" for t in sc.model.turns.values()) > 5
