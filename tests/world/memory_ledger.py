"""A second, in-memory implementation of the `WorldLedger` port (a stand-in world engine).

It shares no storage code with the SQLite ledger: only the port's plain data types and the
world rules (`tether.world.rules`), which it calls exactly as the SQLite ledger does, so a Host
that runs on it runs on the port alone and neither engine has a rule of its own. Not durable: a
restart test needs the SQLite ledger.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    HeadFacts,
    ReceiptRejected,
    WorldFacts,
    WorldNotFound,
    WorldSnapshot,
    Writer,
    rules,
)


@dataclass
class _World:
    run_id: str
    head_tick: int
    head_token: str
    epoch: int = 0
    post_commit_tick: int = 0
    close_state: str = "open"
    sticky: bool = False

    def facts(self) -> WorldFacts:
        return WorldFacts(
            run_id=self.run_id,
            head_tick=self.head_tick,
            head_token=self.head_token,
            writer_epoch=self.epoch,
            post_commit_tick=self.post_commit_tick,
            close_state=self.close_state,
            close_sticky=self.sticky,
        )


@dataclass
class _Tick:
    tokens: set[str]
    state: dict[tuple[str, str], str]
    changes: frozenset[tuple[str, str]] = field(default_factory=frozenset)


class MemoryLedger:
    """An in-memory world engine behind the `WorldLedger` port. Shareable across threads."""

    def __init__(self) -> None:
        self._mutex = threading.RLock()
        self._worlds: dict[str, _World] = {}
        self._ticks: dict[tuple[str, str, int], _Tick] = {}
        self._visible: dict[str, set[str]] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._owners: dict[str, tuple[int, int]] = {}

    def _live(self, world_id: str) -> _World:
        w = self._worlds.get(world_id)
        rules.live_world(world_id, None if w is None else w.facts())
        assert w is not None
        return w

    def _genesis(self, world_id: str, state: dict[tuple[str, str], str]) -> CommittedTickReceipt:
        run_id, token = "run_" + uuid.uuid4().hex, "vt_" + secrets.token_hex(16)
        self._ticks[(world_id, run_id, 0)] = _Tick({token}, dict(state))
        self._visible.setdefault(world_id, set()).add(token)
        w = self._worlds.get(world_id)
        if w is None:
            self._worlds[world_id] = _World(run_id, 0, token)
        else:
            w.run_id, w.head_tick, w.head_token, w.post_commit_tick = run_id, 0, token, 0
        return CommittedTickReceipt(world_id, run_id, 0, token)

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        with self._mutex:
            rules.check_new_world(world_id, world_id in self._worlds)
            return self._genesis(world_id, {})

    def worlds(self) -> list[str]:
        with self._mutex:
            return sorted(k for k, w in self._worlds.items() if w.close_state != "destroyed")

    def start_run(self, writer: Writer) -> CommittedTickReceipt:
        with self._mutex:
            rules.check_writer(writer, self._live(writer.world_id).facts())
            return self._genesis(writer.world_id, {})

    def acquire_writer(self, world_id: str) -> Writer:
        with self._mutex:
            w = self._live(world_id)
            writer = rules.next_writer(world_id, w.facts())
            w.epoch = writer.epoch
            return writer

    def commit(
        self, writer: Writer, parent: CommittedTickReceipt, writes: Sequence[ComponentWrite]
    ) -> CommittedTickReceipt:
        encoded = rules.encode_writes(writes)
        with self._mutex:  # everything below lands together: the head CAS is this block
            w = self._live(writer.world_id)
            tick = rules.commit_tick(writer, parent, w.facts())
            state = dict(self._ticks[(writer.world_id, w.run_id, w.head_tick)].state)
            for key, text in encoded.items():
                if text is None:
                    state.pop(key, None)
                else:
                    state[key] = text
            token = "vt_" + secrets.token_hex(16)
            self._ticks[(writer.world_id, w.run_id, tick)] = _Tick(
                {token}, state, frozenset(encoded)
            )
            self._visible[writer.world_id].add(token)
            w.head_tick, w.head_token = tick, token
            return CommittedTickReceipt(writer.world_id, w.run_id, tick, token)

    def head(self, world_id: str) -> CommittedTickReceipt:
        with self._mutex:
            return rules.head_of(world_id, self._live(world_id).facts())

    def read_at(self, receipt: CommittedTickReceipt) -> WorldSnapshot:
        token = rules.receipt_token(receipt)
        with self._mutex:
            t = self._ticks.get((receipt.world_id, receipt.run_id, receipt.tick))
            if t is None or token not in t.tokens:
                raise ReceiptRejected("no_such_tick", f"no committed tick matches {receipt!r}")
            return WorldSnapshot.of(receipt, t.state, t.changes)

    def check_receipt(self, receipt: CommittedTickReceipt) -> None:
        token = rules.receipt_token(receipt)
        with self._mutex:
            w = self._worlds.get(receipt.world_id)
            t = self._ticks.get((receipt.world_id, receipt.run_id, receipt.tick))
            facts = (
                None
                if w is None
                else HeadFacts(
                    run_id=w.run_id,
                    head_tick=w.head_tick,
                    destroyed=w.close_state == "destroyed",
                    tokens_at_tick=frozenset(t.tokens) if t else frozenset(),
                    visible=token in self._visible.get(receipt.world_id, set()),
                )
            )
        rules.judge_receipt(receipt, facts)

    def visibility_allowlist(self, world_id: str) -> frozenset[str]:
        with self._mutex:
            return frozenset(self._visible.get(world_id, set()))

    @contextmanager
    def _locked(self, world_id: str) -> Iterator[None]:
        with self._mutex:
            lock = self._locks.setdefault(world_id, threading.RLock())
        with lock:
            me, depth = self._owners.get(world_id, (threading.get_ident(), 0))
            self._owners[world_id] = (me, depth + 1)
            try:
                yield
            finally:
                me, depth = self._owners[world_id]
                if depth == 1:
                    del self._owners[world_id]
                else:
                    self._owners[world_id] = (me, depth - 1)

    def lock(self, world_id: str) -> AbstractContextManager[None]:
        return self._locked(world_id)

    def holds_lock(self, world_id: str | None = None) -> bool:
        me = threading.get_ident()
        owners = dict(self._owners)
        return any(o == me for w, (o, _) in owners.items() if world_id in (None, w))

    def pending_post_commit(self, world_id: str) -> CommittedTickReceipt | None:
        with self._mutex:
            facts = self._live(world_id).facts()
            return rules.head_of(world_id, facts) if rules.post_commit_pending(facts) else None

    def complete_post_commit(self, receipt: CommittedTickReceipt) -> None:
        with self._mutex:
            self.check_receipt(receipt)
            w = self._live(receipt.world_id)
            w.post_commit_tick = rules.post_commit_mark(receipt, w.facts())

    def fork(self, source: CommittedTickReceipt, new_world_id: str) -> CommittedTickReceipt:
        with self._mutex:
            self.check_receipt(source)
            rules.check_settled_head(source, self._live(source.world_id).facts())
            rules.check_new_world(new_world_id, new_world_id in self._worlds)
            state = self._ticks[(source.world_id, source.run_id, source.tick)].state
            return self._genesis(new_world_id, state)

    def reserve_close(self, world_id: str, *, sticky: bool) -> None:
        with self._mutex:
            w = self._live(world_id)
            w.close_state, w.sticky = rules.reserve_close(w.facts(), sticky=sticky)

    def rollback_close(self, world_id: str) -> None:
        with self._mutex:
            w = self._live(world_id)
            w.close_state = rules.rollback_close(w.facts())

    def close_state(self, world_id: str) -> tuple[str, bool]:
        with self._mutex:
            w = self._worlds.get(world_id)
            if w is None:
                raise WorldNotFound(f"world {world_id!r} does not exist")
            return w.close_state, w.sticky

    def destroy(self, world_id: str, head: CommittedTickReceipt | None = None) -> None:
        with self._mutex:
            w = self._live(world_id)
            rules.check_destroyable(world_id, w.facts())
            if head is not None:
                rules.check_settled_head(head, w.facts())
            for key in [k for k in self._ticks if k[0] == world_id]:
                del self._ticks[key]
            self._visible.pop(world_id, None)
            w.close_state = "destroyed"

    def close(self) -> None:
        """Nothing to release."""
