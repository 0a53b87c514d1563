"""The fail-closed receipt rule, written once: a ledger reports facts, this decides.

A receipt may admit or settle work only if it carries a non-empty visibility token, names an
existing, undestroyed world, the world's current run and committed head tick, that head has
exactly one token and it is the receipt's, and the token is in the pinned allowlist. The first
broken rule names the `ReceiptRejected` code (`RECEIPT_REJECTION_CODES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.world._errors import ReceiptRejected
from tether.world._types import CommittedTickReceipt


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
