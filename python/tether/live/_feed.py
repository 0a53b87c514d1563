"""The publisher's I/O side: one world's catalog records and journal facts turned into live
frames, and the canonical record as of each frame.

`LiveFeed.sync` reads the world's records (the catalog) and each Activity's journal operation,
publishes what changed through the Rust framer (`LivePublisher`): per Activity its new trace
lines first (`tool_output`: a ``set``, then ``append_text`` at byte offsets), then its message
delta and its interactions; then each turn and the runtime state. The frames go to the
attached sinks (a `LiveServer`), in seq order. `canonical` syncs, then returns the record the
frames describe as of the last seq: the position a subscriber reconciles at.

A message once published terminal gets no more trace lines (the publisher would only send a
discontinuity for them): its trace ends with its settlement.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.activities import ActivityKey, ActivityRecord, Receipt
from tether.live._mapping import (
    interactions_for,
    message_id_for,
    runtime_state,
    runtime_update,
    session_record,
    tool_call_delta,
    tool_call_payload,
    tool_call_status,
    turn_for,
    turn_id_for,
    turn_update,
)
from tether.live._trace import TraceLog, Wording, trace_lines
from tether.operations import Operation

__all__ = ["Canonical", "FrameSink", "LiveFeed", "PublisherSource", "new_epoch"]

#: A frame's receiver: the frame's JSON bytes and its seq.
FrameSink = Callable[[bytes, int], None]


def new_epoch() -> int:
    """A fresh epoch for a publisher that starts: random, below 2**53 (exact in JavaScript)."""
    return secrets.randbits(52) + 1


@dataclass(frozen=True)
class Canonical:
    """The canonical record of a session as of frame ``seq`` of ``epoch``."""

    epoch: int
    seq: int
    record: dict[str, Any]


class PublisherSource:
    """A `LivePublisher` whose frames go to attached sinks (thread-safe: one lock around the
    publisher, so frames leave in seq order).

    Args:
        publisher: the Rust publisher (this object is its single owner from now on).
    """

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher
        self._lock = threading.RLock()
        self._sinks: list[FrameSink] = []

    @property
    def epoch(self) -> int:
        return int(self.publisher.epoch)

    @property
    def seq(self) -> int:
        with self._lock:
            return int(self.publisher.seq)

    def attach(self, sink: FrameSink) -> int:
        """Send every later frame to `sink` too; the seq of the last frame before it."""
        with self._lock:
            self._sinks.append(sink)
            return int(self.publisher.seq)

    def detach(self, sink: FrameSink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def flush(self) -> int:
        """Frame what is queued and send the frames; returns how many."""
        n = 0
        with self._lock:
            while (frame := self.publisher.poll_frame()) is not None:
                n += 1
                self._emit(frame)
        return n

    def _emit(self, frame: bytes) -> None:
        seq = int(self.publisher.seq)
        for sink in list(self._sinks):
            sink(frame, seq)

    def heartbeat(self) -> None:
        """Send an empty frame (it still advances seq: a subscriber sees a trailing loss)."""
        with self._lock:
            self._emit(self.publisher.heartbeat())

    def tool_output(self, message_id: str, turn_id: str, text: str, *, now_ms: int) -> None:
        with self._lock:
            self.publisher.tool_output(message_id, turn_id, text, now_ms=now_ms)

    def publish(self, event: Any) -> None:
        with self._lock:
            self.publisher.publish(event)

    def sync(self) -> int:
        """Nothing to read: send what is queued."""
        return self.flush()


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LiveFeed(PublisherSource):
    """One world's live frames from the catalog and the operations journal.

    Args:
        workspace_id: the live contract's workspace.
        world_id: the world (the agent session).
        records: the world's Activity records now (read from the catalog on every sync).
        operation: the journal operation of a record (None when it has none yet).
        wordings: families' trace wordings by kind (default: `DEFAULT_WORDINGS`).
        epoch: the publisher's epoch (default: a fresh random one: a restarted daemon's
            subscribers see an epoch change).
        clock: wall-clock milliseconds for ``occurredAtUnixMs``.
        publisher_options: passed to `LivePublisher` (chunk size, output cap, marker).
    """

    def __init__(
        self,
        workspace_id: str,
        world_id: str,
        records: Callable[[], Iterable[ActivityRecord]],
        operation: Callable[[ActivityRecord], Operation | None] | None = None,
        *,
        wordings: Mapping[str, Wording] | None = None,
        epoch: int | None = None,
        clock: Callable[[], int] | None = None,
        **publisher_options: Any,
    ) -> None:
        from tether._core import LivePublisher

        if wordings is None:
            from tether.live._wordings import DEFAULT_WORDINGS

            wordings = DEFAULT_WORDINGS
        super().__init__(
            LivePublisher(
                workspace_id,
                world_id,
                epoch=new_epoch() if epoch is None else epoch,
                **publisher_options,
            )
        )
        self.workspace_id = workspace_id
        self.world_id = world_id
        self._records = records
        self._operation = operation or (lambda record: None)
        self._wordings = wordings
        self._clock = clock or _wall_ms
        self._traces: dict[ActivityKey, TraceLog] = {}
        self._messages: dict[ActivityKey, tuple[ActivityRecord, Any]] = {}
        self._terminal: set[ActivityKey] = set()
        self._interactions: dict[str, dict[str, Any]] = {}
        self._turns: dict[Receipt, dict[str, Any]] = {}
        self._runtime: str | None = None
        #: The records of the last sync: the canonical record is built from them on demand.
        self._synced: list[ActivityRecord] = []

    def _now(self) -> int:
        return max(1, self._clock())

    def _sync_record(self, r: ActivityRecord, now: int) -> bool:
        """Publish what changed of one record; False when nothing of it can have changed."""
        held = self._messages.get(r.key)
        if held is not None and (held[0] is r or held[0] == r) and r.key in self._terminal:
            return False  # settled and published as it is: nothing of it can change
        key, mid, tid = r.key, message_id_for(r.key), turn_id_for(r.source)
        if key not in self._terminal:
            log = self._traces.setdefault(key, TraceLog())
            added = log.update(trace_lines(r, self._operation(r), wordings=self._wordings))
            if added:
                self.publisher.tool_output(mid, tid, added, now_ms=now)
        state = (
            tool_call_payload(r),
            tool_call_status(r),
            None if r.settlement is None else r.settlement.settled_at_ms,
        )
        if held is None or held[1] != state:
            previous = None if held is None else held[0]
            self.publisher.publish(
                tool_call_delta(r, workspace_id=self.workspace_id, now_ms=now, previous=previous)
            )
            self._messages[key] = (r, state)
            if r.settlement is not None:
                self._terminal.add(key)
        for x in interactions_for(r):
            sent = self._interactions.get(x["requestId"])
            # Answered and superseded are terminal: only the canonical record changes one a
            # subscriber holds (a later decision makes an earlier answered one superseded).
            if sent is not None and (sent == x or sent["status"] != "pending"):
                continue
            self._interactions[x["requestId"]] = x
            self.publisher.publish(
                {
                    "workspaceId": self.workspace_id,
                    "agentSessionId": self.world_id,
                    "eventType": "interaction_update",
                    "data": {
                        "workspaceId": self.workspace_id,
                        "agentSessionId": self.world_id,
                        "eventType": "interaction_update",
                        "occurredAtUnixMs": now,
                        "interaction": x,
                    },
                }
            )
        return True

    def sync(self) -> int:
        """Read the records and journal, publish what changed, send the frames; returns how
        many frames were sent."""
        with self._lock:
            records = sorted(self._records(), key=lambda r: (r.admitted_at_ms, r.key.activity_id))
            now = self._now()
            # A turn is recomputed only when one of its records may have changed.
            touched = {r.source for r in records if self._sync_record(r, now)}
            by_receipt: dict[Receipt, list[ActivityRecord]] = {}
            for r in records:
                if r.source in touched:
                    by_receipt.setdefault(r.source, []).append(r)
            for receipt, recs in by_receipt.items():
                turn = turn_for(receipt, recs)
                if self._turns.get(receipt) != turn:
                    self._turns[receipt] = turn
                    self.publisher.publish(
                        turn_update(receipt, recs, workspace_id=self.workspace_id, now_ms=now)
                    )
            if len(self._messages) > len(records):
                self._forget(records)
            state = runtime_state(records)
            if state != self._runtime:
                self._runtime = state
                self.publisher.publish(
                    runtime_update(
                        self.world_id, records, workspace_id=self.workspace_id, now_ms=now
                    )
                )
            self._synced = records
            return self.flush()

    def _forget(self, records: list[ActivityRecord]) -> None:
        """Drop what was published of settled records that `records` no longer holds (a
        bounded feed let them go): their trace, message and interactions, and each turn no
        record is left in. Nothing is sent; should one come back, it is published anew."""
        present = {r.key for r in records}
        for key in [k for k in self._messages if k not in present and k in self._terminal]:
            old, _ = self._messages.pop(key)
            self._terminal.discard(key)
            self._traces.pop(key, None)
            for x in interactions_for(old):
                self._interactions.pop(x["requestId"], None)
            self.publisher.forget_message(message_id_for(key))
        receipts = {r.source for r in records}
        for receipt in [rc for rc in self._turns if rc not in receipts]:
            del self._turns[receipt]
            self.publisher.forget_turn(turn_id_for(receipt))

    def trace(self, key: ActivityKey) -> str:
        """The trace text written so far for an Activity ("" when none)."""
        with self._lock:
            log = self._traces.get(key)
            return "" if log is None else log.text

    def canonical(self) -> Canonical:
        """Sync, then the canonical record as of the last frame sent (what a subscriber that
        must re-read reconciles with, at that position)."""
        with self._lock:
            self.sync()
            outputs = {
                message_id_for(k): self.publisher.capped_output(log.text)
                for k, log in self._traces.items()
            }
            record = session_record(self.workspace_id, self.world_id, self._synced, outputs=outputs)
            return Canonical(self.epoch, int(self.publisher.seq), record)
