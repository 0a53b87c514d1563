"""The provider operations journal: binding, attempts, the sent log, results, proofs, queries,
retention, and operation ids that never name a path outside the journal."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from tether.errors import JournalError
from tether.operations import JOURNAL_ERROR_CODES, Journal, check_operation_id, digest_of


def test_bind_is_create_if_absent_and_another_request_is_a_conflict(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    op = journal.bind("op-1", {"a": 1}, device="arm")
    assert op.request == {"a": 1} and op.device == "arm" and op.state == "bound"
    assert op.request_digest == digest_of({"a": 1})
    again = journal.bind("op-1", {"a": 1}, device="arm")
    assert again.bound == op.bound
    with pytest.raises(JournalError) as err:
        journal.bind("op-1", {"a": 2})
    assert err.value.code == "request_conflict"
    assert journal.get("op-1") is not None and journal.get("op-2") is None


@pytest.mark.parametrize("bad", [".", "..", "", "../x", "a/b", "/abs", "-x", "a" * 257, 7, None])
def test_unsafe_operation_ids_are_refused_before_they_name_anything(
    tmp_path: Path, bad: object
) -> None:
    journal = Journal(tmp_path / "j")
    with pytest.raises(JournalError) as err:
        check_operation_id(bad)
    assert err.value.code == "bad_operation_id"
    with pytest.raises(JournalError):
        journal.get(bad)  # type: ignore[arg-type]
    with pytest.raises(JournalError):
        journal.bind(bad, {})  # type: ignore[arg-type]
    assert not (tmp_path / "j").exists()


def test_ids_that_differ_only_by_punctuation_stay_apart(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.bind("robot_move:a", {"x": 1})
    journal.bind("robot_move_a", {"x": 2})  # the old store mapped both to one directory
    assert journal.get("robot_move:a").request == {"x": 1}  # type: ignore[union-attr]
    assert journal.get("robot_move_a").request == {"x": 2}  # type: ignore[union-attr]


def test_each_attempt_starts_once_and_never_after_its_fence(tmp_path: Path) -> None:
    op = Journal(tmp_path).bind("op", {})
    op.start(1, {"fence": 1})
    with pytest.raises(JournalError) as err:
        op.start(1, {"fence": 2})
    assert err.value.code == "attempt_already_started"
    assert op.fence(2, {"by_attempt": 3}) and not op.fence(2, {"by_attempt": 4})
    with pytest.raises(JournalError) as err:
        op.start(2, {})
    assert err.value.code == "attempt_fenced"
    assert op.attempts() == [1] and op.next_attempt() == 2 and op.state == "started"
    assert op.marker(1) is not None and op.marker(1)["fence"] == 1  # type: ignore[index]


def test_the_sent_log_is_append_only_and_a_torn_line_is_no_command(tmp_path: Path) -> None:
    op = Journal(tmp_path).bind("op", {})
    op.log_sent({"attempt": 1, "instruction": "reg_write"})
    op.log_sent({"attempt": 2, "instruction": "action"})
    with open(op.path / "sent.jsonl", "ab") as f:
        f.write(b'{"attempt": 2, "instr')  # a crash mid-append: never sent
    assert [r["instruction"] for r in op.sent()] == ["reg_write", "action"]
    assert [r["instruction"] for r in op.sent(2)] == ["action"]


def test_preimages_and_proofs_are_create_if_absent(tmp_path: Path) -> None:
    op = Journal(tmp_path).bind("op", {})
    assert op.record_preimage(1, {"p": 1}) == {"p": 1}
    assert op.record_preimage(1, {"p": 2}) == {"p": 1}  # the first read stands
    proof = op.record_proof("neutralised-2", {"ids": [1]})
    assert proof["digest"] == digest_of({"ids": [1], "proof": "neutralised-2"})
    assert op.record_proof("neutralised-2", {"ids": [1]}) == proof
    with pytest.raises(JournalError) as err:
        op.record_proof("neutralised-2", {"ids": [2]})
    assert err.value.code == "proof_conflict"
    assert op.proofs() == ["neutralised-2"] and op.proof("neutralised-2") == proof


def test_a_pending_result_is_published_once_verified_or_removed_when_fenced_out(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    payloads = tmp_path / "payloads"
    payloads.mkdir()

    def put(data: bytes) -> dict[str, str]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (payloads / digest[7:]).write_bytes(data)
        return {"ref": digest[7:], "digest": digest}

    def verify(pointer: dict[str, object]) -> bool:
        path = payloads / str(pointer["ref"])
        data = path.read_bytes() if path.exists() else b""
        return "sha256:" + hashlib.sha256(data).hexdigest() == pointer["digest"]

    def remove(pointer: dict[str, object]) -> None:
        (payloads / str(pointer["ref"])).unlink(missing_ok=True)

    # crash between making the result durable and publishing it: reused after verification
    a = journal.bind("a", {})
    a.start(1, {})
    a.stage_result(1, put(b"result a"))
    assert a.result() is None and list(a.pending()) == [1]
    published = a.publish_pending(1, verify)
    assert published is not None and a.result() == published and a.pending() == {}

    # the same crash, then the attempt was fenced out: the payload is removed, nothing published
    b = journal.bind("b", {})
    b.start(1, {})
    pointer = put(b"result b")
    b.stage_result(1, pointer)
    b.fence(1, {"by_attempt": 2})
    assert b.publish_pending(1, verify) is None
    assert b.discard_pending(1, remove) == pointer
    assert b.pending() == {} and not (payloads / pointer["ref"]).exists() and b.result() is None

    # a damaged payload is never published
    c = journal.bind("c", {})
    bad = put(b"result c")
    (payloads / bad["ref"]).write_bytes(b"torn")
    c.stage_result(1, bad)
    assert c.publish_pending(1, verify) is None and c.result() is None


def test_publish_keeps_the_first_result(tmp_path: Path) -> None:
    op = Journal(tmp_path).bind("op", {})
    op.publish({"ref": "r1", "digest": "sha256:1"})
    assert op.publish({"ref": "r1", "digest": "sha256:1"})["ref"] == "r1"
    with pytest.raises(JournalError) as err:
        op.publish({"ref": "r2", "digest": "sha256:2"})
    assert err.value.code == "result_conflict"
    assert op.state == "published"


def test_query_by_state_device_and_age(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.bind("a", {}, device="arm")
    journal.bind("b", {}, device="arm").start(1, {})
    journal.bind("c", {}, device="sim").publish({"digest": "sha256:c"})
    assert [s["operation_id"] for s in journal.query(device="arm")] == ["a", "b"]
    assert [s["operation_id"] for s in journal.query(state="started")] == ["b"]
    assert [s["operation_id"] for s in journal.query(state="published")] == ["c"]
    old = journal.get("a")
    assert old is not None
    past = (old.updated_at_ms() - 3_600_000) / 1000
    for p in old.path.iterdir():
        os.utime(p, (past, past))
    assert [s["operation_id"] for s in journal.query(older_than_ms=1_800_000)] == ["a"]
    with pytest.raises(ValueError):
        journal.query(state="done")


def test_pruning_removes_payloads_and_a_pruned_id_never_starts_again(tmp_path: Path) -> None:
    journal = Journal(tmp_path, retention_ms=0)
    op = journal.bind("done", {"x": 1})
    op.start(1, {})
    op.record_preimage(1, {"p": 1})
    op.log_sent({"attempt": 1})
    op.publish({"ref": "r", "digest": "sha256:r"})
    journal.bind("running", {}).start(1, {})
    assert Journal(tmp_path).prune() == []  # no retention configured: keep everything
    assert journal.prune() == ["done"]
    assert sorted(p.name for p in op.path.iterdir()) == ["bound.json", "pruned.json", "result.json"]
    assert op.state == "pruned" and op.result() == {"ref": "r", "digest": "sha256:r"}
    assert journal.bind("done", {"x": 1}).state == "pruned"
    with pytest.raises(JournalError) as err:
        op.start(2, {})
    assert err.value.code == "operation_pruned"
    with pytest.raises(JournalError):
        journal.bind("done", {"x": 2})  # the binding survives pruning
    assert journal.get("running").state == "started"  # type: ignore[union-attr]


def test_a_damaged_record_is_a_typed_error(tmp_path: Path) -> None:
    op = Journal(tmp_path).bind("op", {})
    (op.path / "bound.json").write_bytes(b"{torn")
    with pytest.raises(JournalError) as err:
        _ = op.request
    assert err.value.code == "journal_corrupt"


def test_error_codes_are_listed() -> None:
    with pytest.raises(ValueError):
        JournalError("no_such_code", "x")
    assert len(set(JOURNAL_ERROR_CODES)) == len(JOURNAL_ERROR_CODES)


def test_an_entry_before_any_binding_holds_fences_and_is_adopted_by_the_binding(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    with pytest.raises(JournalError) as err:
        journal.entry("..")
    assert err.value.code == "bad_operation_id"
    early = journal.entry("op-1")  # a reconciler fences attempts no one bound yet
    assert early.fence(1, {"by": "reconcile"}) and early.fenced(1)
    assert journal.get("op-1") is None and list(journal.operations()) == []
    op = journal.bind("op-1", {"a": 1})
    assert op.path == early.path and op.fenced(1)
    with pytest.raises(JournalError) as refused:
        op.start(1, {})
    assert refused.value.code == "attempt_fenced"
    assert [s["operation_id"] for s in journal.query()] == ["op-1"]
