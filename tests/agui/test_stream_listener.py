"""The SSE stream's listener (StreamServer under tether._listen.ListenerPolicy), over real
sockets: HTTPS on loopback with a self-signed certificate a verifying client trusts; off
loopback (this machine's own non-loopback address) a bearer principal on every request, 401,
403 and 429; a token in the query string refused; a plain non-loopback bind refused before
any socket is opened."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether._listen import ListenerError, TlsConfig
from tether.agui.stream import RunStream, StoreState, StreamServer
from tether.devices import credentials
from tether.devices.config import HostConfig, parse_config

from tests._listeners import Cert, make_authority, make_cert, require_non_loopback_address
from tests._secrets import OBSERVER, OPERATOR, PLANNER

FAST = credentials.MINIMUM


def host_config(state_dir: Path, cert: Cert) -> HostConfig[object]:
    text = (
        f'[host]\nstate_dir = "{state_dir}"\n'
        f'[operators.ann]\ncredential = "{credentials.hash_secret(OPERATOR, FAST)}"\n'
        f'[planners.ci]\ntoken = "{credentials.hash_secret(PLANNER, FAST)}"\n'
        f'[planners.dash]\ntoken = "{credentials.hash_secret(OBSERVER, FAST)}"\n'
        f'role = "observer"\n[tls]\ncert = "{cert.cert}"\nkey = "{cert.key}"\n'
    )
    return parse_config(text)


@pytest.fixture
def finished_stream() -> RunStream:
    """A run that started and finished: a new subscriber gets three frames, then the end."""
    stream = RunStream("thread-1", "run-1", StoreState())
    stream.start()
    stream.finish()
    return stream


def client_context(cert: Cert) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert.cert))  # verifies chain and name
    return context


def get(
    server: StreamServer,
    context: ssl.SSLContext | None,
    path: str = "/events",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = server._httpd.server_address[:2]
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection(str(host), int(port), timeout=10)
    else:
        conn = http.client.HTTPSConnection(str(host), int(port), timeout=10, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def events(body: bytes) -> list[str]:
    return [
        json.loads(line[len(b"data: ") :])["type"]
        for line in body.splitlines()
        if line.startswith(b"data: ")
    ]


@pytest.fixture
def serving(request: pytest.FixtureRequest) -> Iterator[list[StreamServer]]:
    servers: list[StreamServer] = []
    yield servers
    for server in servers:
        server.close()


def test_tls_serves_https_on_loopback_to_a_verifying_client(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    cert = make_cert(tmp_path / "tls")
    server = StreamServer(finished_stream, tls=TlsConfig(cert.cert, cert.key))
    serving.append(server)
    assert server.url.startswith("https://127.0.0.1:")
    status, _, body = get(server, client_context(cert))
    assert status == 200
    assert events(body) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    # A client that does not trust this certificate is refused by its own verification.
    with pytest.raises(ssl.SSLCertVerificationError):
        get(server, ssl.create_default_context())
    # Plain HTTP to the TLS port gets no stream.
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        status, _, body = get(server, None)
        assert status != 200 and b"RUN_STARTED" not in body
        raise ConnectionError("answered, but not with the stream")
    # TLS 1.2 or later is what is spoken (the context refuses anything older).
    host, port = server._httpd.server_address[:2]
    for highest in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.MAXIMUM_SUPPORTED):
        context = client_context(cert)
        context.maximum_version = highest
        raw = socket.create_connection((str(host), int(port)), timeout=10)
        with context.wrap_socket(raw, server_hostname=str(host)) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # The server still serves after the failed handshakes.
    assert get(server, client_context(cert))[0] == 200


def test_with_a_client_ca_the_stream_serves_only_clients_with_a_certificate_of_it(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    ca = make_authority(tmp_path / "ca")
    other = make_authority(tmp_path / "other", "other-ca")
    cert = ca.issue("server", server=True)
    server = StreamServer(finished_stream, tls=TlsConfig(cert.cert, cert.key, ca.cert))
    serving.append(server)

    def context(client: Cert | None) -> ssl.SSLContext:
        made = ssl.create_default_context(cafile=str(ca.cert))
        if client is not None:
            made.load_cert_chain(client.cert, client.key)
        return made

    status, _, body = get(server, context(ca.issue("viewer", server=False)))
    assert status == 200 and "RUN_FINISHED" in events(body)
    for client in (None, other.issue("stranger", server=False)):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError, http.client.HTTPException)):
            get(server, context(client))


def test_a_stalled_handshake_does_not_block_other_clients(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    cert = make_cert(tmp_path / "tls")
    server = StreamServer(finished_stream, tls=TlsConfig(cert.cert, cert.key))
    serving.append(server)
    host, port = server._httpd.server_address[:2]
    with socket.create_connection((str(host), int(port))):  # connects, never says hello
        assert get(server, client_context(cert))[0] == 200


def test_a_plain_bind_off_loopback_is_refused_before_any_socket(
    finished_stream: RunStream,
) -> None:
    address = require_non_loopback_address()
    with socket.socket() as probe:
        probe.bind((address, 0))
        port = probe.getsockname()[1]
    with pytest.raises(ListenerError) as info:
        StreamServer(finished_stream, address, port)
    assert info.value.code == "insecure_listener"
    assert info.value.details["address"] == f"{address}:{port}"
    with socket.socket() as again:  # the port was never taken
        again.bind((address, port))
    with pytest.raises(ListenerError) as info:
        StreamServer(finished_stream, "0.0.0.0", 0)
    assert info.value.code == "insecure_listener"


def test_off_loopback_every_request_needs_a_bearer_principal(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    address = require_non_loopback_address()
    cert = make_cert(tmp_path / "tls", ips=("127.0.0.1", address))
    cfg = host_config(tmp_path / "state", cert)
    assert cfg.tls is not None
    with pytest.raises(ListenerError) as info:  # TLS without principals to check
        StreamServer(finished_stream, address, 0, tls=cfg.tls)
    assert info.value.code == "no_authenticator"
    server = StreamServer(
        finished_stream, address, 0, tls=cfg.tls, authenticator=cfg.authenticator()
    )
    serving.append(server)
    assert server.url.startswith(f"https://{address}:")
    context = client_context(cert)

    status, headers, body = get(server, context)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert json.loads(body)["code"] == "principal_required" and b"RUN_STARTED" not in body
    status, _, body = get(server, context, headers={"Authorization": "Bearer not-the-token"})
    assert status == 401 and json.loads(body)["code"] == "credential_refused"
    for token in (PLANNER, OBSERVER, OPERATOR):  # every role reads the stream
        status, _, body = get(server, context, headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and events(body)[0] == "RUN_STARTED"
    # A token in the query string is refused, even beside a valid header.
    status, _, body = get(
        server, context, f"/events?token={PLANNER}", {"Authorization": f"Bearer {PLANNER}"}
    )
    assert status == 400 and json.loads(body)["code"] == "secret_in_url"
    assert PLANNER.encode() not in body


def test_too_many_wrong_tokens_answer_429_then_even_the_right_one(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    address = require_non_loopback_address()
    cert = make_cert(tmp_path / "tls", ips=(address,))
    cfg = host_config(tmp_path / "state", cert)
    server = StreamServer(
        finished_stream, address, 0, tls=cfg.tls, authenticator=cfg.authenticator()
    )
    serving.append(server)
    context = client_context(cert)
    for _ in range(credentials.RATE_LIMIT):
        status, _, _ = get(server, context, headers={"Authorization": "Bearer guess-guess-guess"})
        assert status == 401
    status, headers, body = get(server, context, headers={"Authorization": f"Bearer {PLANNER}"})
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert json.loads(body)["code"] == "credential_rate_limited"


def test_loopback_without_tls_needs_no_principal_but_refuses_a_token_in_the_url(
    finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    server = StreamServer(finished_stream)
    serving.append(server)
    assert server.url.startswith("http://127.0.0.1:")
    assert get(server, None)[0] == 200
    status, _, body = get(server, None, "/events?access_token=abc")
    assert status == 400 and json.loads(body)["code"] == "secret_in_url"
    status, _, body = get(server, None, headers={"Host": "rebound.example"})
    assert status == 403 and json.loads(body)["code"] == "host_not_loopback"


def test_loopback_can_ask_for_a_principal_too(
    tmp_path: Path, finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    cfg = host_config(tmp_path / "state", make_cert(tmp_path / "tls"))
    server = StreamServer(
        finished_stream, authenticator=cfg.authenticator(), require_principal=True
    )
    serving.append(server)
    assert get(server, None)[0] == 401
    assert get(server, None, headers={"Authorization": f"Bearer {PLANNER}"})[0] == 200


def _raw_post(server: StreamServer, length: str) -> bytes:
    """A POST to /events with this Content-Length header, its answer as raw bytes (the
    server closes the connection after a refusal; 5 s at most)."""
    from urllib.parse import urlsplit

    where = urlsplit(server.url)
    host, port = str(where.hostname), int(where.port or 80)
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(
            f"POST /events HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {length}\r\n"
            "Content-Type: application/json\r\n\r\n".encode()
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_a_post_with_a_bad_or_huge_length_is_refused_in_json(
    finished_stream: RunStream, serving: list[StreamServer]
) -> None:
    """AG-UI clients POST a RunAgentInput (read and ignored): a Content-Length that is no
    length is 400, one past `MAX_BODY` is 413, each a JSON answer, never a dropped
    connection or a read that waits for the peer to close."""
    server = StreamServer(finished_stream)
    serving.append(server)
    for length, status in (("abc", b" 400 "), ("-1", b" 400 "), (str(10**9), b" 413 ")):
        answer = _raw_post(server, length)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert status in head.split(b"\r\n")[0], (length, answer[:200])
        assert json.loads(body)["message"], body
