"""The bridge's checks of a submitted remote move, before anything is committed: every request
the wire cannot carry as the identical ExecuteRequest is `bad_request`, never a raw error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tether._config import HostConfigError
from tether.adapters.grpc.bridge import BridgeRequestError, parse_remote, submit
from tether.adapters.grpc.remote import KIND_ABSOLUTE, KIND_SIM_REACH, _document

GOOD = {"device": "arm", "targets": {"a": 0.5, "b": -0.3}, "not_after_ms": 1_900_000_000_000}


def test_a_good_request_is_its_intent() -> None:
    write = submit("op-1", KIND_ABSOLUTE, GOOD)
    assert write.value == {**GOOD, "kind": KIND_ABSOLUTE}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"not_after_ms": 1 << 63}, "64-bit"),
        ({"not_after_ms": 0}, "not_after_ms"),
        ({"not_after_ms": True}, "not_after_ms"),
        ({"targets": {"a": "x"}}, 'targets["a"]'),
        ({"targets": {"a": None}}, 'targets["a"]'),
        ({"targets": {"a": True}}, 'targets["a"]'),
        ({"targets": {"a": math.nan}}, "finite"),
        ({"targets": {"a": math.inf}}, "finite"),
        ({"targets": {"": 0.1}}, "joint names"),
        ({"targets": {1: 0.1}}, "joint names"),
        ({"targets": {}}, "targets"),
        ({"targets": [0.1]}, "targets"),
    ],
)
def test_a_request_the_wire_cannot_carry_is_bad_request(change: dict[str, Any], says: str) -> None:
    with pytest.raises(BridgeRequestError) as info:
        submit("op-1", KIND_ABSOLUTE, {**GOOD, **change})
    assert info.value.code == "bad_request"
    assert says in info.value.message


def test_a_remote_document_that_is_not_json_is_kept_as_its_text() -> None:
    assert _document(b'{"outcome": "completed"}') == {"outcome": "completed"}
    assert _document(b"adapter error: the port went away") == {
        "text": "adapter error: the port went away"
    }
    assert _document(b"\xff\xfe") == {"text": "\ufffd\ufffd"}


def test_a_sim_reach_is_submitted_with_its_own_keys() -> None:
    reach = {"seed": 7, "target_x": 0.1, "target_y": 0.05, "episodes": 1, "steps": 50}
    sim = {"device": "sim", "sim_reach": reach, "not_after_ms": 1_900_000_000_000}
    assert submit("op-2", KIND_SIM_REACH, sim).value == {**sim, "kind": KIND_SIM_REACH}
    with pytest.raises(BridgeRequestError) as info:
        submit("op-2", KIND_SIM_REACH, {**sim, "targets": {"a": 0.1}})
    assert info.value.code == "bad_request" and "'targets'" in info.value.message
    with pytest.raises(BridgeRequestError) as info:
        submit("op-2", KIND_ABSOLUTE, {**GOOD, "sim_reach": reach})
    assert info.value.code == "bad_request" and "'sim_reach'" in info.value.message


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe token", "not UTF-8"),
        ("tök-en\n".encode(), "printable ASCII"),
        (b"tok\x01en\n", "printable ASCII"),
        (b"two words\n", "printable ASCII"),
    ],
)
def test_a_token_that_cannot_travel_in_a_header_is_bad_remote_token(
    tmp_path: Path, content: bytes, says: str
) -> None:
    token = tmp_path / "token"
    token.write_bytes(content)
    token.chmod(0o600)
    with pytest.raises(HostConfigError) as info:
        parse_remote({"address": "127.0.0.1:50051", "token_file": "token"}, tmp_path)
    assert info.value.code == "bad_remote_token"
    assert says in info.value.message
    assert "tök" not in info.value.message and "words" not in info.value.message


def test_a_token_file_of_one_line_is_the_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("  planner-token-7f3a  \n")
    token.chmod(0o600)
    remote = parse_remote({"address": "127.0.0.1:50051", "token_file": "token"}, tmp_path)
    assert remote.token == "planner-token-7f3a"
