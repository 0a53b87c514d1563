"""Mutual TLS on RobotControl (`[tls] client_ca`): `tether serve` (a subprocess) over the
DYNAMIXEL emulator, real grpcio clients on loopback, and the bridge side's `RemoteHost`
presenting a client certificate. The CA, server and client certificates are made in the test
with the `openssl` CLI."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import grpc
import pytest
from _dxl_setup import GOALS, EmulatorProcess, emulator_process, target_actions
from _grpc_setup import SERVE, bearer, daemon, grpc_config, status_code, tether, with_tls
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.activities import ActivityKey
from tether.adapters.grpc.bridge import parse_remote
from tether.adapters.grpc.remote import KIND_ABSOLUTE, RemoteHost, intent, remote_move_family
from tether.runtime import FamilyError, Host
from tether.testing._ports import free_port

from tests._listeners import Authority, Cert, make_authority, make_cert, make_dated_cert
from tests._secrets import PLANNER


def mtls_config(tmp_path: Path, url: str, server: Cert, client_ca: str, **kw: str) -> Path:
    config = grpc_config(tmp_path, url, **kw)
    table = f'[tls]\ncert = "{server.cert}"\nkey = "{server.key}"\nclient_ca = "{client_ca}"\n'
    config.write_text(config.read_text().replace("[ports.bus]", table + "[ports.bus]", 1))
    return config


def control(
    port: str, ca: Authority, client: Cert | None
) -> tuple[grpc.Channel, rpc.RobotControlStub]:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.cert.read_bytes(),
        private_key=None if client is None else client.key.read_bytes(),
        certificate_chain=None if client is None else client.cert.read_bytes(),
    )
    channel = grpc.secure_channel(f"localhost:{port}", creds)
    return channel, rpc.RobotControlStub(channel)


def test_a_client_certificate_of_the_ca_connects_and_others_fail_the_handshake(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    ca = make_authority(tmp_path / "ca")
    other = make_authority(tmp_path / "other", "other-ca")
    server = ca.issue("server", server=True)
    ours = ca.issue("planner-box", server=False)
    stranger = other.issue("stranger", server=False)
    config = mtls_config(tmp_path, emu.path, server, str(ca.cert))
    with daemon(config) as (_, ready):
        port = ready["grpc"].rsplit(":", 1)[1]
        channel, stub = control(port, ca, ours)
        listed = stub.ListOperations(pb.ListOperationsRequest(), metadata=bearer(), timeout=10)
        assert list(listed.operations) == []
        # The certificate admits the connection; the bearer token still names the principal.
        assert (
            status_code(lambda: stub.ListOperations(pb.ListOperationsRequest(), timeout=10))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        wrong = (("authorization", "Bearer not-the-token-of-anyone"),)
        assert (
            status_code(lambda: stub.ListOperations(pb.ListOperationsRequest(), metadata=wrong))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        channel.close()
        # Without a client certificate, or with one of another CA: no handshake, nothing served.
        for client in (None, stranger):
            channel, stub = control(port, ca, client)
            assert (
                status_code(
                    lambda s=stub: s.ListOperations(
                        pb.ListOperationsRequest(), metadata=bearer(), timeout=5
                    )
                )
                == grpc.StatusCode.UNAVAILABLE
            ), client
            channel.close()
        # The server still serves the good client after the failed handshakes.
        channel, stub = control(port, ca, ours)
        again = stub.ListOperations(pb.ListOperationsRequest(), metadata=bearer(), timeout=10)
        assert list(again.operations) == []
        channel.close()
    assert [e for e in emu.journal() if e["instruction"] in ("action", "reg_write")] == []


def test_the_bridge_side_remote_host_presents_its_client_certificate(tmp_path: Path) -> None:
    ca = make_authority(tmp_path / "ca")
    server = ca.issue("server", server=True)
    client = ca.issue("bridge", server=False)
    port = free_port()
    remote = RemoteHost(
        f"localhost:{port}",
        PLANNER,
        root_certificates=ca.cert.read_bytes(),
        timeout_s=10.0,
        certificate_chain=client.cert.read_bytes(),
        private_key=client.key.read_bytes(),
    )
    text = repr(remote)
    assert "client_cert=True" in text and PLANNER not in text and "PRIVATE" not in text
    with pytest.raises(FamilyError):
        RemoteHost("localhost:1", PLANNER, certificate_chain=client.cert.read_bytes())
    family = remote_move_family(remote)
    host = Host(tmp_path / "bridge", [family], workers=1, lease_ms=1500)
    host.start()
    try:
        with emulator_process(tmp_path) as emu:
            serve = SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
            config = mtls_config(tmp_path, emu.path, server, str(ca.cert), serve=serve)
            with daemon(config):
                host.create_world("bridge")
                request = {
                    "kind": KIND_ABSOLUTE,
                    "device": "arm",
                    "targets": {"a": 0.5, "b": -0.3},
                    "not_after_ms": int(time.time() * 1000) + 120_000,
                }
                host.commit_tick("bridge", [intent("m1", request)])
                assert host.wait_settled("bridge", 90)
                record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "m1"))
                assert record is not None and record.result is not None
                assert not record.result.failed
                doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
                assert doc["state"] == "succeeded", doc
            assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
    finally:
        host.close()
        family.adapter.close()  # type: ignore[attr-defined]


def test_a_misspelled_or_unreadable_client_ca_is_a_one_line_usage_error(
    tmp_path: Path,
) -> None:
    ca = make_authority(tmp_path / "ca")
    server = ca.issue("server", server=True)
    cases = (
        ("client_cas", str(ca.cert), "unknown_key", "client_cas"),
        ("client_ca", str(tmp_path / "missing.pem"), "tls_unusable", "tls.client_ca"),
        ("client_ca", str(server.key), "tls_unusable", "tls.client_ca"),  # no certificate
    )
    for key, value, code, named in cases:
        config = grpc_config(tmp_path, "/dev/null-unused")
        with_tls(config, f'cert = "{server.cert}"\nkey = "{server.key}"\n{key} = "{value}"\n')
        done = tether("serve", "--config", str(config))
        assert done.returncode == 2, (key, value, done.stderr)
        assert code in done.stderr and named in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_key_under_a_passphrase_is_refused_never_prompted_for_on_the_terminal(
    tmp_path: Path,
) -> None:
    """`tether serve` started on a terminal with a `[tls] key` encrypted under a passphrase:
    OpenSSL would ask for it on the controlling terminal, and the daemon would hang at the
    prompt. It is one line naming the key and the cause instead, exit 2, at once."""
    cert = make_cert(tmp_path / "tls")
    encrypted = tmp_path / "tls" / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(cert.key), "-aes256", "-passout", "pass:sekrit",
         "-out", str(encrypted)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    encrypted.chmod(0o600)
    config = grpc_config(tmp_path, "/dev/null-unused")
    with_tls(config, f'cert = "{cert.cert}"\nkey = "{encrypted}"\n')
    leader, follower = pty.openpty()

    def on_the_terminal() -> None:  # a session whose controlling terminal is the pty
        os.setsid()
        fcntl.ioctl(follower, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        preexec_fn=on_the_terminal,
    )
    os.close(follower)
    said = b""
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    said += os.read(leader, 4096)
                except OSError:  # EIO: it closed the terminal (on its way out)
                    break
        try:  # closing its terminal comes before its exit: a loaded machine shows the gap
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running (prompting?): {said!r}") from None
        with contextlib.suppress(OSError):
            while select.select([leader], [], [], 0.2)[0]:
                chunk = os.read(leader, 4096)
                if not chunk:
                    break
                said += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = said.decode(errors="replace")
    assert proc.returncode == 2, text
    assert "pass phrase" not in text.lower(), text
    assert "tls_unusable" in text and "encrypted with a passphrase" in text, text
    assert str(encrypted) in text and "Traceback" not in text, text


def test_an_expired_server_certificate_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """`tether serve` with an expired `[tls] cert` does not start (every client would refuse
    its handshake): one line naming the certificate and its end, exit 2."""
    expired = make_dated_cert(tmp_path / "tls", "20200101000000Z", "20200102000000Z")
    config = grpc_config(tmp_path, "/dev/null-unused")
    with_tls(config, f'cert = "{expired.cert}"\nkey = "{expired.key}"\n')
    done = tether("serve", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "tls_unusable" in done.stderr and "expired on Jan  2 00:00:00 2020" in done.stderr
    assert str(expired.cert) in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_bridge_configured_with_client_cert_and_key_reaches_a_mutual_tls_host(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """`[remote] client_cert`/`client_key` (host.toml) are what the bridge presents: with them
    the configured channel is served; the same table without them fails the handshake."""
    ca = make_authority(tmp_path / "ca")
    server = ca.issue("server", server=True)
    client = ca.issue("bridge", server=False)
    config = mtls_config(tmp_path, emu.path, server, str(ca.cert))
    token = tmp_path / "planner.token"
    token.write_text(PLANNER + "\n")
    token.chmod(0o600)
    with daemon(config) as (_, ready):
        port = ready["grpc"].rsplit(":", 1)[1]
        table = {"address": f"localhost:{port}", "token_file": "planner.token", "ca": str(ca.cert)}
        with_pair = {**table, "client_cert": str(client.cert), "client_key": str(client.key)}
        for raw, served in ((with_pair, True), (table, False)):
            remote = parse_remote(raw, tmp_path)
            channel = remote.channel()
            stub = rpc.RobotControlStub(channel)
            meta = (("authorization", f"Bearer {remote.token}"),)
            call = lambda s=stub, m=meta: s.ListOperations(  # noqa: E731
                pb.ListOperationsRequest(), metadata=m, timeout=10
            )
            if served:
                assert list(call().operations) == []
            else:
                assert status_code(call) == grpc.StatusCode.UNAVAILABLE
            channel.close()


def test_a_bridge_that_does_not_trust_the_hosts_certificate_says_so_in_its_evidence(
    tmp_path: Path,
) -> None:
    """A wrong CA on the bridge side fails every TLS handshake: the reconcile's evidence keeps
    grpcio's account of it (the handshake), not only UNAVAILABLE, so an operator can tell a
    wrong certificate from a host that is down."""
    from _grpc_setup import reconcile_context
    from tether.adapters.grpc.remote import RemoteMoveAdapter
    from tether.runtime import Unknown

    ca, other = make_authority(tmp_path / "ca"), make_authority(tmp_path / "other")
    server = ca.issue("server", server=True)
    client = ca.issue("bridge", server=False)
    port = free_port()
    key = ActivityKey("bridge", KIND_ABSOLUTE, "t1")
    request = {
        "kind": KIND_ABSOLUTE,
        "device": "arm",
        "targets": {"a": 0.5, "b": -0.3},
        "not_after_ms": int(time.time() * 1000) + 120_000,
    }
    with emulator_process(tmp_path) as emu:
        serve = SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        with daemon(mtls_config(tmp_path, emu.path, server, str(ca.cert), serve=serve)):
            adapter = RemoteMoveAdapter(
                RemoteHost(
                    f"localhost:{port}",
                    PLANNER,
                    root_certificates=other.cert.read_bytes(),  # not the host's CA
                    timeout_s=5.0,
                    certificate_chain=client.cert.read_bytes(),
                    private_key=client.key.read_bytes(),
                )
            )
            try:
                ctx = reconcile_context(tmp_path, key)
                out = adapter.reconcile(ctx, request)
            finally:
                adapter.close()
    assert isinstance(out, Unknown), out
    doc = json.loads(ctx.artifacts.get_bytes(out.evidence.ref, out.evidence.digest))
    assert doc["reason"] == "remote_unreachable", doc
    assert "UNAVAILABLE: " in doc["error"] and "handshake" in doc["error"].lower(), doc


def test_a_failed_tls_handshake_leaves_the_json_log_json(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """grpcio's C core wrote its own INFO line (`I1207 ... Handshake failed ...`) to stderr for
    each plaintext client of a TLS listener: raw text amid the JSON log, one per retry."""
    import json
    import os
    import signal
    import subprocess
    import sys

    ca = make_authority(tmp_path / "ca")
    config = mtls_config(tmp_path, emu.path, ca.issue("server", server=True), str(ca.cert))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_CRASH", "GRPC_"))}
    argv = [sys.executable, "-m", "tether", "serve", "--config", str(config)]
    with subprocess.Popen(
        [*argv, "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stdout is not None
            ready = json.loads(proc.stdout.readline())
            port = ready["grpc"].rsplit(":", 1)[1]
            with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:  # no TLS: no handshake
                with pytest.raises(grpc.FutureTimeoutError):
                    grpc.channel_ready_future(plain).result(timeout=2)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "the daemon logged nothing"
    for line in lines:
        json.loads(line)  # every line is a JSON object: no raw C-core text
