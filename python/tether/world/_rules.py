"""Every world rule, written once: a ledger reports facts and stores what these decide.

Everything that decides a world's writer, head, post-commit work, close state or a receipt's
admissibility lives here, as pure functions over plain data (`WorldFacts`, `HeadFacts`). The
SQLite ledger and every other `WorldLedger` (the in-memory test ledger included) read the
facts in one consistent view, call these, and persist the outcome in the same transaction;
none re-implements a rule.

Rules:
- Writer epoch: acquiring a writer takes the next epoch (`next_writer`). A commit or new run
  needs the world open (`WorldClosing`) and the writer's epoch to be the current one
  (`StaleWriter`): a newer writer fences every older one.
- Head CAS: a tick commits on `parent` only while `parent` is exactly the head (world, run,
  tick, token; else `HeadConflict`) and the head's post-commit work is done (else
  `PostCommitPending`); it becomes tick `head + 1` (`commit_tick`). A tick writes each
  (entity, component) at most once (`encode_writes`).
- Post-commit mark: the head's post-commit work is pending while the mark is below the head
  tick (`post_commit_pending`); completing it for a receipt that is still the head raises the
  mark to that tick and never lowers it (`post_commit_mark`).
- Sticky close: reserving a close makes the world `closing`; the reservation is sticky if it
  or any earlier one was (`reserve_close`). A rollback reopens only a non-sticky `closing`
  world (`rollback_close`). Only a `closing` world may be destroyed (`check_destroyable`).
- Lifecycle head: fork and destroy(head) proceed only while the head the caller judged
  settled is still the head with its post-commit work done (`check_settled_head`).
- Receipt reader (fail closed): a receipt may admit or settle work only if it carries a
  non-empty visibility token, names an existing, undestroyed world, its current run and
  committed head tick, that head has exactly one token and it is the receipt's, and the token
  is in the pinned allowlist (`judge_receipt`). The first broken rule names the
  `ReceiptRejected` code (`RECEIPT_REJECTION_CODES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tether.world._errors import (
    HeadConflict,
    InvalidWrite,
    PostCommitPending,
    ReceiptRejected,
    StaleWriter,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldNotFound,
)
from tether.world._types import CommittedTickReceipt, ComponentWrite, Writer, check_name

CloseState = Literal["open", "closing", "destroyed"]


@dataclass(frozen=True, slots=True)
class WorldFacts:
    """What a ledger holds about one world, read in one consistent view.

    Attributes:
        run_id: the current run.
        head_tick: the committed head tick in that run.
        head_token: the head's visibility token.
        writer_epoch: the epoch of the newest writer (0: none yet).
        post_commit_tick: the highest tick whose post-commit work succeeded.
        close_state: ``open``, ``closing`` or ``destroyed``.
        close_sticky: whether the close reservation survives a rollback.
    """

    run_id: str
    head_tick: int
    head_token: str
    writer_epoch: int
    post_commit_tick: int
    close_state: str
    close_sticky: bool


@dataclass(frozen=True, slots=True)
class HeadFacts:
    """What a ledger holds about a receipt's world, read in one consistent view.

    Attributes:
        run_id: the world's current run.
        head_tick: the world's committed head tick in that run.
        destroyed: whether the world was destroyed.
        tokens_at_tick: every token recorded for (world, receipt run, receipt tick).
        visible: whether the receipt's token is in the world's visibility allowlist.
    """

    run_id: str
    head_tick: int
    destroyed: bool
    tokens_at_tick: frozenset[str]
    visible: bool


# -- worlds ---------------------------------------------------------------------------------


def check_new_world(world_id: str, exists: bool) -> None:
    """A world id may be created (or forked to) once: never again, even after a destroy."""
    check_name("world id", world_id, slash=False)  # an Activity's key joins it with '/'
    if exists:
        raise WorldExists(f"world {world_id!r} already exists (or was destroyed)")


def live_world(world_id: str, facts: WorldFacts | None) -> WorldFacts:
    """The facts of an existing, undestroyed world, else `WorldNotFound`."""
    if facts is None or facts.close_state == "destroyed":
        raise WorldNotFound(f"world {world_id!r} does not exist")
    return facts


def head_of(world_id: str, facts: WorldFacts) -> CommittedTickReceipt:
    """The head receipt the facts describe."""
    return CommittedTickReceipt(world_id, facts.run_id, facts.head_tick, facts.head_token)


# -- writer epoch ---------------------------------------------------------------------------


def next_writer(world_id: str, facts: WorldFacts) -> Writer:
    """The writer that fences every earlier one: the next epoch (store `writer.epoch`)."""
    return Writer(world_id, facts.writer_epoch + 1)


def check_writer(writer: Writer, facts: WorldFacts) -> None:
    """A commit or new run needs an open world and the current writer epoch."""
    if facts.close_state != "open":
        raise WorldClosing(f"world {writer.world_id!r} is reserved for close")
    if writer.epoch != facts.writer_epoch:
        raise StaleWriter(
            f"writer epoch {writer.epoch} of {writer.world_id!r} was superseded by"
            f" {facts.writer_epoch}"
        )


# -- head CAS -------------------------------------------------------------------------------


def encode_writes(writes: Iterable[ComponentWrite]) -> dict[tuple[str, str], str | None]:
    """The canonical texts of a tick's writes by (entity, component); None deletes.

    Raises:
        InvalidWrite: a write is malformed, or one (entity, component) is written twice.
    """
    encoded: dict[tuple[str, str], str | None] = {}
    for w in writes:
        if not isinstance(w, ComponentWrite):
            raise InvalidWrite(f"{w!r} is not a ComponentWrite")
        key = (w.entity, w.component)
        text = w.encoded()
        if key in encoded:
            raise InvalidWrite(f"component {key} is written twice in one tick")
        encoded[key] = text
    return encoded


def commit_tick(writer: Writer, parent: CommittedTickReceipt, facts: WorldFacts) -> int:
    """The tick a commit by ``writer`` on ``parent`` creates, if it may commit at all."""
    if parent.world_id != writer.world_id:
        raise InvalidWrite(f"parent receipt names world {parent.world_id!r}")
    check_writer(writer, facts)
    if (parent.run_id, parent.tick, parent.visibility_token) != (
        facts.run_id,
        facts.head_tick,
        facts.head_token,
    ):
        raise HeadConflict(
            f"parent {parent} is not the head ({facts.run_id}, tick {facts.head_tick})"
        )
    if post_commit_pending(facts):
        raise PostCommitPending(
            f"post-commit work of tick {facts.head_tick} of {writer.world_id!r} has not succeeded"
        )
    return facts.head_tick + 1


# -- post-commit mark -----------------------------------------------------------------------


def post_commit_pending(facts: WorldFacts) -> bool:
    """Whether the head's post-commit work has not succeeded yet."""
    return facts.post_commit_tick < facts.head_tick


def post_commit_mark(receipt: CommittedTickReceipt, facts: WorldFacts) -> int:
    """The mark after completing ``receipt``'s post-commit work: its tick if it is still the
    head of the current run, and never lower than before."""
    if (receipt.run_id, receipt.tick) != (facts.run_id, facts.head_tick):
        return facts.post_commit_tick
    return max(facts.post_commit_tick, receipt.tick)


# -- sticky close and lifecycle -------------------------------------------------------------


def reserve_close(facts: WorldFacts, *, sticky: bool) -> tuple[CloseState, bool]:
    """(close state, sticky) after a close reservation: sticky once any reservation was."""
    return "closing", facts.close_sticky or sticky


def rollback_close(facts: WorldFacts) -> str:
    """The close state after a rollback: only a provisional (non-sticky) close reopens."""
    if facts.close_state == "closing" and not facts.close_sticky:
        return "open"
    return facts.close_state


def check_destroyable(world_id: str, facts: WorldFacts) -> None:
    """Only a world reserved for close may be destroyed."""
    if facts.close_state != "closing":
        raise WorldError(f"world {world_id!r} must be reserved for close before destroy")


def check_settled_head(receipt: CommittedTickReceipt, facts: WorldFacts) -> None:
    """Fork and destroy(head): ``receipt`` (the head the caller judged settled) must still be
    the head, with its post-commit work (admission, settlement) done."""
    if (facts.run_id, facts.head_tick, facts.head_token) != (
        receipt.run_id,
        receipt.tick,
        receipt.visibility_token,
    ):
        raise HeadConflict(f"{receipt} is no longer the head of {receipt.world_id!r}")
    if post_commit_pending(facts):
        raise PostCommitPending(
            f"post-commit work of tick {facts.head_tick} of {receipt.world_id!r} has not succeeded"
        )


# -- the receipt reader ---------------------------------------------------------------------


def receipt_token(receipt: CommittedTickReceipt) -> str:
    """The receipt's visibility token, or `ReceiptRejected("tokenless")`."""
    token = getattr(receipt, "visibility_token", None)
    if not isinstance(token, str) or not token:
        raise ReceiptRejected("tokenless", f"receipt {receipt!r} carries no visibility token")
    return token


def judge_receipt(receipt: CommittedTickReceipt, facts: HeadFacts | None) -> None:
    """Raise `ReceiptRejected` unless `facts` (None: no such world) vouch for `receipt`."""
    token = receipt_token(receipt)
    if facts is None:
        raise ReceiptRejected("unknown_world", f"no world {receipt.world_id!r}")
    if facts.destroyed:
        raise ReceiptRejected("world_closed", f"world {receipt.world_id!r} was destroyed")
    if facts.run_id != receipt.run_id:
        raise ReceiptRejected(
            "wrong_run", f"run {receipt.run_id!r} is not the current run {facts.run_id!r}"
        )
    if facts.head_tick != receipt.tick:
        raise ReceiptRejected(
            "not_head", f"tick {receipt.tick} is not the committed head {facts.head_tick}"
        )
    if len(facts.tokens_at_tick) > 1:
        raise ReceiptRejected(
            "ambiguous_head", f"head tick {receipt.tick} has {len(facts.tokens_at_tick)} tokens"
        )
    if facts.tokens_at_tick != {token}:
        raise ReceiptRejected("sibling_token", f"token {token!r} is not the head's token")
    if not facts.visible:
        raise ReceiptRejected("not_visible", f"token {token!r} is not in the allowlist")
