"""Gate: every bad receipt fails closed for admission AND for settlement (seed sections 2, 7).

Each case starts from a real committed tick whose post-commit work is still owed, breaks the
receipt (or the ledger rows that vouch for it) in one way, and runs the Host's post-commit
work on it: nothing is admitted or settled, and the retained head stays blocked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hosttools import akey, drain, make_host, world_sql
from journal_provider import intents
from tether.runtime import Host
from tether.world import CommittedTickReceipt, ReceiptRejected

Breaker = Callable[[Host, Path, CommittedTickReceipt], CommittedTickReceipt]


def _sql(tmp_path: Path, sql: str, *args: object) -> None:
    world_sql(tmp_path, sql, *args)


def _later_head(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    host.ledger.complete_post_commit(r)  # someone marked it done, then a later tick landed
    host.ledger.commit(host.ticker.writer("w"), r, [])
    return r


def _sibling(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    return dataclasses.replace(r, visibility_token="vt_sibling")


def _multi(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    _sql(tmp_path, "INSERT INTO tick_tokens VALUES ('w', ?, ?, 'vt_second')", r.run_id, r.tick)
    _sql(tmp_path, "INSERT INTO visibility VALUES ('w', 'vt_second')")
    return r


def _wrong_world(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    return dataclasses.replace(r, world_id="v")


def _wrong_run(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    return dataclasses.replace(r, run_id="run_elsewhere")


def _invisible(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    _sql(tmp_path, "DELETE FROM visibility WHERE token = ?", r.visibility_token)
    return r


def _empty_token(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    return dataclasses.replace(r, visibility_token="")


def _no_token(host: Host, tmp_path: Path, r: CommittedTickReceipt) -> CommittedTickReceipt:
    return dataclasses.replace(r, visibility_token=None)  # type: ignore[arg-type]


CASES: dict[str, tuple[Breaker, set[str]]] = {
    "later_head": (_later_head, {"not_head"}),
    "sibling_token": (_sibling, {"sibling_token"}),
    "multiple_head_tokens": (_multi, {"ambiguous_head"}),
    "wrong_world": (_wrong_world, {"wrong_run", "sibling_token", "not_head"}),
    "wrong_run": (_wrong_run, {"wrong_run"}),
    "missing_visibility_entry": (_invisible, {"not_visible"}),
    "empty_token": (_empty_token, {"tokenless"}),
    "tokenless": (_no_token, {"tokenless"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_receipt_admits_nothing(case: str, tmp_path: Path) -> None:
    breaker, codes = CASES[case]
    with make_host(tmp_path) as host:
        host.create_world("w")
        host.create_world("v")
        r1 = host.ledger.commit(host.ticker.writer("w"), host.head("w"), intents(2))
        bad = breaker(host, tmp_path, r1)
        with pytest.raises(ReceiptRejected) as err:
            host.ticker.post_commit(bad)
        assert err.value.code in codes
        assert host.get(akey(0)) is None and host.get(akey(1)) is None
        assert host.get(akey(0, world="v")) is None
        assert not host.catalog.has_unsettled("w") and not host.catalog.has_unsettled("v")
        if case != "later_head":
            assert host.ledger.pending_post_commit("w") == r1  # tick 2 stays blocked


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_receipt_settles_nothing(case: str, tmp_path: Path) -> None:
    breaker, codes = CASES[case]
    with make_host(tmp_path) as host:
        host.create_world("w")
        host.create_world("v")
        r1 = host.commit_tick("w", intents(2))
        assert drain(host) == 2
        assert host.restage() == 2
        obs = host.stager.observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        r2 = host.ledger.commit(host.ticker.writer("w"), r1, writes)  # evidence committed in r2
        bad = breaker(host, tmp_path, r2)
        with pytest.raises(ReceiptRejected) as err:
            host.ticker.post_commit(bad)
        assert err.value.code in codes
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.result is not None and rec.settlement is None


def test_the_same_receipts_unbroken_admit_and_settle(tmp_path: Path) -> None:
    """The control: the exact head, untouched, admits and then settles."""
    with make_host(tmp_path) as host:
        host.create_world("w")
        r1 = host.ledger.commit(host.ticker.writer("w"), host.head("w"), intents(2))
        host.ticker.post_commit(r1)
        assert host.get(akey(0)) is not None and host.get(akey(1)) is not None
        drain(host)
        host.restage()
        obs = host.stager.observations_for("w")
        r2 = host.ledger.commit(
            host.ticker.writer("w"), r1, [w for o in obs for w in (*o.facts, o.evidence)]
        )
        host.ticker.post_commit(r2)
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None
            assert rec.settlement.receipt == r2
