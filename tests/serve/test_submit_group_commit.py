"""Group commit of `Daemon.submit` (the control socket's `submit` and gRPC's `Execute`): submits
of one world that queue while a commit runs are decided on one snapshot and committed in ONE
world tick, each still answered by its own rule and only once its intent is durable.

A real `Daemon` on real SQLite over the emulated DYNAMIXEL arm (no worker: nothing moves). The
batches are made without timing: the test holds the world's exact-world lock (the one every
tick takes), so the committer of the first submit waits inside its commit while the others
queue behind it; releasing the lock lets the first tick commit and the queued submits follow
as one batch. Then `tether serve` is SIGKILLed inside a batch commit (its crash points) under
concurrent submits, and every submit that was answered is durable after the restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tether.activities import ActivityKey
from tether.client import Client, ClientError
from tether.serve.daemon import SUBMIT_BATCH, Daemon, ServeRefusal
from tether.world import SqliteLedger, StaleWriter

from tests._serve import daemon, killed, serve_config
from tests.adapters._dxl_setup import emulator_process

KIND = "physical_ai.robot_move.absolute"
WORLD = "planner"
SERVE = '\n[serve]\nworkers = 0\nsse = "off"\n'


def move(a: float) -> dict[str, Any]:
    return {"robot": "arm", "targets": {"a": a, "b": 0.0}}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    with emulator_process(tmp_path) as emu:
        running = Daemon.from_path(serve_config(tmp_path, emu.path, extra=SERVE)).start()
        try:
            yield running
        finally:
            running.close()


class Caller(threading.Thread):
    """One concurrent `submit`; its answer (key, created) or the error it raised."""

    def __init__(self, daemon: Daemon, activity: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.daemon_, self.activity, self.body = daemon, activity, body
        self.answer: tuple[Any, bool] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self.daemon_.submit(WORLD, self.activity, KIND, self.body)
        except BaseException as exc:
            self.error = exc


def queued(daemon: Daemon) -> int:
    with daemon._submit_lock:
        return len(daemon._pending.get(WORLD, ()))


def wait_for(predicate: Any) -> None:
    """Until `predicate()` holds (a thread reaching its queue; no time is asserted)."""
    done = threading.Event()
    while not predicate():
        done.wait(0.005)


@contextmanager
def held_world(daemon: Daemon) -> Iterator[None]:
    """The world exists and the test holds its exact-world lock: a commit waits for it."""
    runtime = daemon.host()
    daemon.submit(WORLD, "genesis", KIND, move(0.0))  # the world exists, its first tick done
    with runtime.ledger.lock(WORLD):
        yield


def batch_of(
    daemon: Daemon, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[Caller, list[Caller]]:
    """Under the held lock: a leader whose commit waits on the lock, then `calls` queued behind
    it in this order (each started once the one before is in the queue)."""
    leader = Caller(daemon, "leader", move(0.05))
    leader.start()
    wait_for(lambda: WORLD in daemon._committing and queued(daemon) == 0)
    callers = []
    for n, (activity, body) in enumerate(calls, start=1):
        caller = Caller(daemon, activity, body)
        caller.start()
        wait_for(lambda n=n: queued(daemon) == n)  # type: ignore[misc]
        callers.append(caller)
    return leader, callers


def test_concurrent_distinct_submits_commit_in_fewer_ticks(served: Daemon) -> None:
    runtime = served.host()
    with held_world(served):
        before = runtime.head(WORLD).tick
        leader, callers = batch_of(served, [(f"op-{i}", move(0.01 * i)) for i in range(40)])
        assert all(c.answer is None and c.error is None for c in [leader, *callers])
    for caller in [leader, *callers]:
        caller.join(60)
        assert caller.error is None and caller.answer is not None, caller.error
        assert caller.answer[1] is True  # each one created its own intent
    # 41 submits, two ticks: the leader's alone, then the 40 that queued behind it.
    assert runtime.head(WORLD).tick == before + 2
    snapshot = runtime.snapshot(WORLD)
    for caller in callers:
        assert snapshot.get(caller.activity, "physical_ai.robot_move.intent") is not None
    # Each was admitted to the catalog (one transaction for the tick's admissions).
    assert all(runtime.get(c.answer[0]) is not None for c in callers if c.answer)


def test_a_lone_submit_is_committed_at_once(served: Daemon) -> None:
    runtime = served.host()
    key, created = served.submit(WORLD, "alone", KIND, move(0.2))
    tick = runtime.head(WORLD).tick
    assert created and runtime.snapshot(WORLD).get("alone", "physical_ai.robot_move.intent")
    assert served.submit(WORLD, "alone", KIND, move(0.2)) == (key, False)
    assert runtime.head(WORLD).tick == tick  # the same request again commits nothing
    assert not served._committing and not served._pending


def test_a_created_submit_is_answered_with_the_record_its_tick_admitted(served: Daemon) -> None:
    runtime = served.host()
    with held_world(served):
        _, callers = batch_of(served, [(f"rec-{i}", move(0.01 * i)) for i in range(3)])
    records = {}
    for caller in callers:
        caller.join(60)
        assert caller.error is None and caller.answer is not None
    for i in range(3):
        key, created, record = served.submit_admitted(WORLD, f"rec-{i}", KIND, move(0.01 * i))
        assert not created and record is None  # not created by this call: nothing admitted
        records[key] = runtime.get(key)
    key, created, record = served.submit_admitted(WORLD, "fresh", KIND, move(0.7))
    # No worker runs (workers = 0): the record as admitted is the record as stored.
    assert created and record is not None and record == runtime.get(key)
    assert record.key == key and record.attempt is None and record.result is None
    assert all(r is not None and r.attempt is None for r in records.values())


def test_an_id_recorded_under_another_kind_is_refused_by_the_committer(served: Daemon) -> None:
    runtime = served.host()
    key, created = served.submit(WORLD, "taken", KIND, move(0.1))
    assert created and runtime.get(key) is not None
    relative = "physical_ai.robot_move.relative"
    tick = runtime.head(WORLD).tick
    # "other" is a new id, but its caller names `key` as one that must hold no record.
    with pytest.raises(ServeRefusal) as refused:
        served.submit(WORLD, "other", relative, move(0.1), unrecorded=(key,))
    assert refused.value.code == "admission_conflict"
    assert refused.value.details["kind"] == KIND
    assert runtime.head(WORLD).tick == tick  # nothing committed
    assert runtime.snapshot(WORLD).get("other", "physical_ai.robot_move.intent") is None
    # A key with no record refuses nothing.
    free = ActivityKey(WORLD, relative, "nobody")
    _, created = served.submit(WORLD, "fine", relative, move(0.1), unrecorded=(free,))
    assert created


def test_rules_per_request_inside_one_batch(served: Daemon) -> None:
    runtime = served.host()
    with held_world(served):
        before = runtime.head(WORLD).tick
        _, callers = batch_of(
            served,
            [
                ("twice", move(0.3)),  # the first under an id wins
                ("twice", move(0.4)),  # another request under it: a conflict
                ("dup", move(0.5)),
                ("dup", move(0.5)),  # equal: one write, both answered, one created
                ("genesis", move(0.0)),  # what the world holds: existing
                ("genesis", move(0.9)),  # another request than the held one: a conflict
                ("dup", move(0.6)),  # another request than the batch's first "dup"
            ],
        )
    for caller in callers:
        caller.join(60)
    first, other, dup1, dup2, held, held_other, dup_other = callers
    assert first.error is None and first.answer is not None and first.answer[1] is True
    for refused in (other, held_other, dup_other):
        assert isinstance(refused.error, ServeRefusal), refused.error
        assert refused.error.code == "admission_conflict" and refused.answer is None
    assert dup1.answer is not None and dup2.answer is not None
    assert dup1.answer[0] == dup2.answer[0]
    assert (dup1.answer[1], dup2.answer[1]) == (True, False)
    assert held.error is None and held.answer is not None and held.answer[1] is False
    assert runtime.head(WORLD).tick == before + 2  # the leader's tick, then this batch's
    snapshot = runtime.snapshot(WORLD)
    intent = "physical_ai.robot_move.intent"
    assert snapshot.get("twice", intent)["targets"]["a"] == 0.3  # type: ignore[index]
    assert snapshot.get("dup", intent)["targets"]["a"] == 0.5  # type: ignore[index]
    assert snapshot.get("genesis", intent)["targets"]["a"] == 0.0  # type: ignore[index]


def test_a_failed_commit_fails_every_caller_of_its_batch(served: Daemon) -> None:
    runtime = served.host()
    with held_world(served):
        before = runtime.head(WORLD).tick
        leader, callers = batch_of(served, [(f"lost-{i}", move(0.01 * i)) for i in range(12)])
        # Another writer takes the world over (a real fence, in the ledger file): the waiting
        # commit and the queued batch's commit are refused.
        other = SqliteLedger.open(served.data_dir / "world.db")
        try:
            other.acquire_writer(WORLD)
        finally:
            other.close()
    for caller in [leader, *callers]:
        caller.join(60)
        assert isinstance(caller.error, StaleWriter), (caller.activity, caller.error)
        assert caller.answer is None
    assert runtime.head(WORLD).tick == before
    snapshot = runtime.snapshot(WORLD)
    for caller in [leader, *callers]:
        assert snapshot.get(caller.activity, "physical_ai.robot_move.intent") is None
    assert not served._committing and not served._pending


def test_a_batch_is_bounded() -> None:
    assert 1 < SUBMIT_BATCH <= 1024


def _flood(client_config: Path, threads: int, per_thread: int) -> dict[str, bool | None]:
    """Submits from `threads` threads (each `per_thread` ids, one after another) until the
    daemon dies; per id: created (answered), or None (no answer)."""
    answers: dict[str, bool | None] = {}
    mutex = threading.Lock()

    def run(t: int) -> None:
        client = Client(config=client_config)
        for i in range(per_thread):
            activity = f"op-{t}-{i}"
            try:
                view = client.submit(WORLD, activity, KIND, move(0.01 * i))
            except ClientError:
                answer = None  # the daemon died before it answered
            else:
                answer = bool(view["created"])
            with mutex:
                answers[activity] = answer

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return answers


@pytest.mark.parametrize(
    "crash_at",
    [
        # The fourth batch's committer, after its batch is collected and decided, before its
        # tick: the batch is not committed and none of it was answered.
        "serve.before_submit_tick@4",
        # The fourth batch's tick is committed, its admissions and answers not yet made.
        "after_intent_tick@4",
    ],
)
def test_serve_killed_inside_a_batch_commit_loses_no_answered_submit(
    tmp_path: Path, crash_at: str
) -> None:
    with emulator_process(tmp_path) as emu:
        config = serve_config(tmp_path, emu.path, extra=SERVE)
        with daemon(config, crash_at=crash_at) as (proc, _):
            answers = _flood(config, threads=12, per_thread=6)
            killed(proc)
        answered = {a for a, created in answers.items() if created is not None}
        assert answered, "no submit was answered before the kill"
        assert len(answered) < len(answers)  # the kill came inside the flood
        client = Client(config=config)
        with daemon(config):
            for activity in sorted(answers):
                i = int(activity.rsplit("-", 1)[1])
                view = client.submit(WORLD, activity, KIND, move(0.01 * i))
                if activity in answered:
                    # Durable: the identical submit is the existing intent, another request
                    # under the id is refused.
                    assert view["created"] is False, activity
                    with pytest.raises(ClientError) as refused:
                        client.submit(WORLD, activity, KIND, move(0.77))
                    assert refused.value.code == "admission_conflict"
