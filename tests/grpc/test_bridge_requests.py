"""The bridge's checks of a submitted remote move, before anything is committed: every request
the wire cannot carry as the identical ExecuteRequest is `bad_request`, never a raw error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tether._config import HostConfigError
from tether.adapters.grpc.bridge import BridgeRequestError, _address, parse_remote, submit
from tether.adapters.grpc.remote import KIND_ABSOLUTE, KIND_SIM_REACH, _document

from tests._listeners import make_authority

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


@pytest.mark.parametrize("key", ["token_file", "ca", "client_cert", "client_key"])
def test_an_empty_path_in_the_remote_table_is_empty_value_never_the_directory(
    tmp_path: Path, key: str
) -> None:
    """An empty path (a template's unset variable) would name the config's own directory:
    `empty_value` naming the key, before anything is read."""
    token = tmp_path / "token"
    token.write_text("planner-token-7f3a\n")
    token.chmod(0o600)
    raw = {"address": "127.0.0.1:50051", "token_file": "token", key: ""}
    with pytest.raises(HostConfigError) as info:
        parse_remote(raw, tmp_path)
    assert info.value.code == "empty_value" and key in info.value.message, info.value


def _token(directory: Path) -> None:
    token = directory / "token"
    token.write_text("planner-token-7f3a\n")
    token.chmod(0o600)


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("127.0.0.1:50051", "127.0.0.1", 50051),
        ("localhost:1", "localhost", 1),
        ("[::1]:50051", "::1", 50051),
    ],
)
def test_an_address_is_host_and_port_with_ipv6_in_brackets(
    tmp_path: Path, address: str, host: str, port: int
) -> None:
    _token(tmp_path)
    remote = parse_remote({"address": address, "token_file": "token"}, tmp_path)
    assert remote.address == address  # grpcio's target, brackets and all
    assert _address(address) == (host, port)


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("::1:50051", "IPv6 address goes in brackets"),  # ::1 port 50051, or ::1:c383?
        ("fe80::1:50051", "IPv6 address goes in brackets"),
        ("[::1:50051", "followed by :PORT"),
        ("[::1]50051", "followed by :PORT"),
        ("[localhost]:50051", "not an IPv6 address"),
        ("[::1]]:50051", "followed by :PORT"),
        ("127.0.0.1:0", "not in 1..65535"),
        ("127.0.0.1:65536", "not in 1..65535"),
        ("127.0.0.1:+80", "not in 1..65535"),
        ("127.0.0.1:\u00b2", "not in 1..65535"),  # a superscript two: a digit to isdigit()
        ("127.0.0.1:\uff15\uff10\uff10\uff15\uff11", "not in 1..65535"),  # full-width 50051
        ("127.0.0.1:", "not in 1..65535"),
        (":50051", "no host or no port"),
        ("127.0.0.1", "no host or no port"),
        ("127.0.0.1 :50051", "white space"),
        ("https://127.0.0.1:50051", "a URL: give the host and port only"),
        ("grpc://localhost:50051/", "a URL: give the host and port only"),
        ("localhost:50051/", "a URL: give the host and port only"),
    ],
)
def test_a_bad_address_is_bad_remote_saying_why(tmp_path: Path, address: str, says: str) -> None:
    _token(tmp_path)
    with pytest.raises(HostConfigError) as info:
        parse_remote({"address": address, "token_file": "token"}, tmp_path)
    assert info.value.code == "bad_remote"
    assert says in info.value.message and repr(address) in info.value.message


def test_a_client_certificate_comes_with_its_key_as_a_loadable_pair(tmp_path: Path) -> None:
    ca = make_authority(tmp_path / "ca")
    ours, other = ca.issue("bridge", server=False), ca.issue("other", server=False)
    _token(tmp_path)
    base = {"address": "127.0.0.1:50051", "token_file": "token"}
    remote = parse_remote(
        {**base, "client_cert": str(ours.cert), "client_key": str(ours.key)}, tmp_path
    )
    assert remote.tls and remote.certificate_chain == ours.cert.read_bytes()
    assert remote.private_key == ours.key.read_bytes()
    assert "PRIVATE" not in repr(remote) and "client_cert=True" in repr(remote)
    # One without the other.
    for one in ({"client_cert": str(ours.cert)}, {"client_key": str(ours.key)}):
        with pytest.raises(HostConfigError) as info:
            parse_remote({**base, **one}, tmp_path)
        assert info.value.code == "bad_remote" and "both or neither" in info.value.message
    # A key of another certificate: refused at start-up, not at a handshake later.
    with pytest.raises(HostConfigError) as info:
        parse_remote(
            {**base, "client_cert": str(ours.cert), "client_key": str(other.key)}, tmp_path
        )
    assert info.value.code == "bad_remote" and "not a usable PEM" in info.value.message
    # The key is a secret: 0600 and this uid's.
    ours.key.chmod(0o644)
    with pytest.raises(HostConfigError) as info:
        parse_remote({**base, "client_cert": str(ours.cert), "client_key": str(ours.key)}, tmp_path)
    assert info.value.code == "bad_remote_token" and "mode 0600" in info.value.message
    ours.key.chmod(0o600)
    # A missing certificate file names its key.
    with pytest.raises(HostConfigError) as info:
        parse_remote({**base, "client_cert": "nope.pem", "client_key": str(ours.key)}, tmp_path)
    assert info.value.code == "bad_remote" and "remote.client_cert" in info.value.message


def test_a_client_certificate_alone_makes_an_off_loopback_remote_tls(tmp_path: Path) -> None:
    ca = make_authority(tmp_path / "ca")
    ours = ca.issue("bridge", server=False)
    _token(tmp_path)
    base = {"address": "192.0.2.7:50051", "token_file": "token"}
    with pytest.raises(HostConfigError) as info:
        parse_remote(base, tmp_path)
    assert info.value.code == "insecure_remote"
    remote = parse_remote(
        {**base, "client_cert": str(ours.cert), "client_key": str(ours.key)}, tmp_path
    )
    assert remote.tls  # the system's roots check the server; the token never goes in clear


def test_an_encrypted_client_key_is_bad_remote_and_never_prompts(tmp_path: Path) -> None:
    import shutil
    import subprocess

    ca = make_authority(tmp_path / "ca")
    ours = ca.issue("bridge", server=False)
    openssl = shutil.which("openssl")
    assert openssl is not None
    locked = tmp_path / "locked.key"
    subprocess.run(
        [openssl, "pkey", "-in", str(ours.key), "-aes256", "-passout", "pass:secret",
         "-out", str(locked)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    locked.chmod(0o600)
    _token(tmp_path)
    table = {"address": "127.0.0.1:50051", "token_file": "token"}
    with pytest.raises(HostConfigError) as info:
        parse_remote({**table, "client_cert": str(ours.cert), "client_key": str(locked)}, tmp_path)
    assert info.value.code == "bad_remote" and "not a usable PEM" in info.value.message


def test_a_remote_token_path_is_read_as_every_host_file_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/tok` was taken as a directory literally named `~` beside host.toml, and `$HOME/tok`
    as one named `$HOME`: `~` is expanded and a shell variable refused, as in every path."""
    home = tmp_path / "home"
    home.mkdir()
    token = home / "tok"
    token.write_text("planner-token-9c1d\n")
    token.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    remote = parse_remote({"address": "127.0.0.1:50051", "token_file": "~/tok"}, tmp_path)
    assert remote.token == "planner-token-9c1d"
    with pytest.raises(HostConfigError) as info:
        parse_remote({"address": "127.0.0.1:50051", "token_file": "$HOME/tok"}, tmp_path)
    assert info.value.code == "unexpanded_variable"
