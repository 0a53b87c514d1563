"""The bridge worker as a process of its own: `tether serve` running `physical_ai.remote_move`
(`tether.adapters.grpc.remote`) against the remote robot host named in host.toml's `[remote]`.

```toml
[serve]
families = ["tether.adapters.grpc.bridge:serve_families"]

[remote]
address = "127.0.0.1:50051"          # the robot host's RobotControl (its `[serve] grpc`)
token_file = "secrets/planner.token" # the planner token: one line of a file owned by the
                                     # daemon's uid, mode 0600; relative to this file
ca = "tls/robot-host-ca.pem"         # optional: TLS with this trust anchor (PEM); without
                                     # it the address must be loopback (`insecure_remote`)
timeout_s = 10.0                     # the per-call deadline (default 10)
client_cert = "tls/bridge.pem"       # optional, with client_key: the client certificate
client_key = "tls/bridge.key"        # (PEM) for a robot host whose [tls] has client_ca
                                     # (mutual TLS); the key file 0600, owned by this uid
```

Rules:
- The table is read strictly (`tether._config.Table`): an unknown or misspelled key is
  `unknown_key`; a bad address or deadline is `bad_remote`; a token file that is missing,
  empty, not 0600 or not owned by this uid is `bad_remote_token`. All exit `tether serve` 2.
- The token is read from the file only (never argv, the environment, a log or a repr:
  `RemoteHost.__repr__` hides it).
- `address` is HOST:PORT; an IPv6 address goes in brackets (`[::1]:50051`): unbracketed,
  `::1:50051` could be an address of its own, so it is `bad_remote`.
- `client_cert` and `client_key` come together (`bad_remote` otherwise) and must make a pair
  that TLS can load (a key of another certificate is `bad_remote` at start-up, not a failed
  handshake later); the key file is a secret: owned by this uid, mode 0600
  (`bad_remote_token` names it otherwise, as for the token). A client certificate means TLS.
- A plaintext channel is refused off loopback (the bearer token would cross the network in
  clear): `insecure_remote`.
- The daemon's `submit` (control socket) takes `{"device", "targets", "not_after_ms"}` under a
  remote_move kind (`{"device", "sim_reach", "not_after_ms"}` under its sim reach kind) and
  commits the intent; the request is checked as the `ExecuteRequest` it
  becomes before anything is committed (`bad_request`).
- Crash points: the runtime's (`tether.runtime.CRASH_POINTS`), the daemon's
  (`serve.after_submit`) and the adapter's (`tether.adapters.grpc.remote.CRASH_POINTS`);
  tests/grpc/test_bridge_crash.py SIGKILLs this process at each of them.
"""

from __future__ import annotations

import ipaddress
import ssl
import tomllib
from pathlib import Path
from typing import Any, Final, cast

from tether._coded import CodedError
from tether._config import HostConfigError, Table
from tether._listen import is_loopback
from tether.adapters.grpc.remote import (
    KIND_SIM_REACH,
    KINDS,
    RemoteHost,
    RemoteMoveAdapter,
    execute_request,
    intent,
)
from tether.adapters.grpc.remote import remote_move_family as _family
from tether.devices.config import REMOTE_KEYS, in_file, path_setting
from tether.devices.credentials import CredentialError, check_private, read_secret
from tether.runtime import Family, FamilyError
from tether.world import ComponentWrite

#: What a submitted remote move carries (its kind is the submit's).
SUBMIT_KEYS: Final = ("device", "targets", "not_after_ms")
#: A submitted sim reach's keys (kind `physical_ai.remote_move.sim_reach`).
SIM_SUBMIT_KEYS: Final = ("device", "sim_reach", "not_after_ms")
#: Every `.code` raised here (the strict table's own besides).
CODES: Final = ("bad_remote", "bad_remote_token", "insecure_remote", "bad_request")


class BridgeRequestError(CodedError):
    """A submitted remote move that is not a valid request (`bad_request`): nothing is
    committed."""


def _error(code: str, message: str, **details: Any) -> HostConfigError:
    return HostConfigError(code, message, details=details)


def _address(text: str) -> tuple[str, int]:
    """HOST and PORT of `text` (`HOST:PORT`, an IPv6 host in brackets), or `bad_remote`."""

    def bad(why: str) -> HostConfigError:
        return _error(
            "bad_remote",
            f"remote.address: {text!r} is not HOST:PORT ({why}; for example 127.0.0.1:50051 "
            "or [::1]:50051)",
            value=text,
        )

    if any(c.isspace() for c in text):
        raise bad("it holds white space")
    if "://" in text or text.endswith("/"):
        raise bad("a URL: give the host and port only, without a scheme or a path")
    if text.startswith("["):
        host, close, rest = text[1:].partition("]")
        if not close or not rest.startswith(":"):
            raise bad("a bracketed IPv6 address is followed by :PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} in brackets is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise bad("no host or no port")
        if ":" in host or "[" in host or "]" in host:
            raise bad("an IPv6 address goes in brackets")
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise bad(f"port {port_text!r} is not in 1..65535")
    return host, int(port_text)


def _at(base: Path, key: str, value: str) -> Path:
    """`[remote]`'s path `key` as every host.toml path is: `~` expanded, no shell variable,
    relative to the file's directory `base` (`path_setting`; a refusal names the key, and
    `load_remote` the file)."""
    return path_setting(base, value, where=f"remote.{key}")


def _client_pair(table: Table, base: Path) -> tuple[bytes, bytes] | None:
    """`client_cert` and `client_key` (PEM), checked to load as a pair, or None."""
    # Each non-empty when given (`empty_value`): an empty path would name the directory.
    cert_text = table.path("client_cert") if "client_cert" in table else None
    key_text = table.path("client_key") if "client_key" in table else None
    if cert_text is None and key_text is None:
        return None
    if key_text is None:
        raise _error("bad_remote", "remote.client_cert needs remote.client_key (both or neither)")
    if cert_text is None:
        raise _error("bad_remote", "remote.client_key needs remote.client_cert (both or neither)")
    cert, key = _at(base, "client_cert", cert_text), _at(base, "client_key", key_text)
    try:
        check_private(key)
    except CredentialError as exc:
        raise _error("bad_remote_token", f"remote.client_key: {exc.message}") from None
    except OSError as exc:
        raise _error(
            "bad_remote_token", f"remote.client_key: {key}: {exc.strerror}", path=str(key)
        ) from None
    try:
        chain, secret = cert.read_bytes(), key.read_bytes()
    except OSError as exc:
        name = "client_cert" if exc.filename == str(cert) else "client_key"
        raise _error("bad_remote", f"remote.{name}: {exc.filename}: {exc.strerror}") from None
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        # No pass phrase (an encrypted key is refused, never prompted for on a terminal).
        probe.load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, ValueError, OSError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        if not isinstance(exc, ssl.SSLError):  # an encrypted key, in OpenSSL's words
            reason = "an encrypted key (a pass phrase is not supported), or no PEM key"
        raise _error(
            "bad_remote",
            f"remote.client_cert {cert} and remote.client_key {key} are not a usable PEM"
            f" certificate and its key ({reason})",
            path=str(cert),
        ) from None
    return chain, secret


def parse_remote(raw: Any, base: Path) -> RemoteHost:
    """The `[remote]` table (`raw`) of the host configuration whose directory is `base`."""
    if raw is None:
        raise _error("bad_remote", "the remote_move family needs a [remote] table (address, ...)")
    table = Table(raw, "remote", REMOTE_KEYS)
    address = table.text("address")
    host, _ = _address(address)
    timeout = table.number("timeout_s", 10.0)
    if not 0 < timeout <= 3600:
        raise _error("bad_remote", f"remote.timeout_s {timeout} is not in (0, 3600]")
    ca_text = table.path("ca") if "ca" in table else None
    root: bytes | None = None
    if ca_text is not None:
        ca = _at(base, "ca", ca_text)
        try:
            root = ca.read_bytes()
        except OSError as exc:
            raise _error("bad_remote", f"remote.ca: {ca}: {exc.strerror}", path=str(ca)) from None
        if b"-----BEGIN CERTIFICATE-----" not in root:
            raise _error("bad_remote", f"remote.ca: {ca} holds no PEM certificate", path=str(ca))
    pair = _client_pair(table, base)
    if root is None and pair is None and not is_loopback(host):
        raise _error(
            "insecure_remote",
            f"remote.address {address!r} is off loopback: set remote.ca (TLS), so the planner"
            " token never crosses the network in clear",
            value=address,
        )
    token_path = _at(base, "token_file", table.path("token_file"))
    try:
        token = read_secret(file=str(token_path)).strip()
    except CredentialError as exc:
        raise _error("bad_remote_token", f"remote.token_file: {exc.message}") from None
    except OSError as exc:
        raise _error(
            "bad_remote_token",
            f"remote.token_file: {token_path}: {exc.strerror}",
            path=str(token_path),
        ) from None
    if not token:
        raise _error(
            "bad_remote_token", f"remote.token_file: {token_path} is empty", path=str(token_path)
        )
    if not all("!" <= c <= "~" for c in token):  # it travels in a header: printable ASCII
        raise _error(
            "bad_remote_token",
            f"remote.token_file: {token_path}: the token must be printable ASCII without spaces"
            " (it is sent as `authorization: Bearer <token>`)",
            path=str(token_path),
        )
    return RemoteHost(
        address,
        token,
        root_certificates=root,
        timeout_s=timeout,
        certificate_chain=None if pair is None else pair[0],
        private_key=None if pair is None else pair[1],
    )


def load_remote(config_path: str | Path) -> RemoteHost:
    """The `[remote]` table of the host configuration at `config_path`."""
    path = Path(config_path)
    raw = tomllib.loads(path.read_text(encoding="utf-8")).get("remote")
    try:
        return parse_remote(raw, path.resolve().parent)
    except HostConfigError as exc:  # named with its file, as every other table's refusal is
        raise in_file(exc, path) from None


def submit(activity_id: str, kind: str, request: dict[str, Any]) -> ComponentWrite:
    """The daemon's admission of a submitted remote move: checked as the ExecuteRequest it
    becomes (under a placeholder id: the real one is the bound provider operation id), then
    its intent write."""
    if kind not in KINDS:
        raise BridgeRequestError("bad_request", f"kind must be one of {KINDS}, not {kind!r}")
    keys = SIM_SUBMIT_KEYS if kind == KIND_SIM_REACH else SUBMIT_KEYS
    what = "remote sim reach" if kind == KIND_SIM_REACH else "remote move"
    unknown = sorted(set(request) - set(keys))
    if unknown:
        raise BridgeRequestError(
            "bad_request",
            f"unknown key {unknown[0]!r} in a {what} (valid: {', '.join(keys)})",
            details={"key": unknown[0]},
        )
    value = {**request, "kind": kind}
    try:
        execute_request(activity_id, value)
    except FamilyError as exc:
        raise BridgeRequestError("bad_request", str(exc)) from None
    return intent(activity_id, value)


def check_config(config_path: str | Path) -> None:
    """`tether serve`'s check of this factory's configuration before it opens anything: the
    `[remote]` host read whole (`load_remote`), its refusal the configuration error it is."""
    load_remote(config_path)


def serve_families(ctx: Any) -> list[tuple[Family, Any]]:
    """`tether serve`'s factory (`[serve] families`): the remote_move family over the
    `[remote]` host, with its submit; its channel closes with the daemon."""
    if not hasattr(ctx, "config"):  # `tether worker` hands its factory a data dir
        from tether.runtime._errors import bad_families

        raise bad_families(
            "tether.adapters.grpc.bridge:serve_families is tether serve's factory ([serve]"
            " families): remote moves run in the daemon that admits them, with its [remote]"
            " host; tether worker has no factory for them"
        )
    family = _family(
        load_remote(ctx.config.path), credentials=Path(ctx.data_dir) / "remote-credentials.json"
    )
    ctx.on_close(cast(RemoteMoveAdapter, family.adapter).close)
    return [(family, submit)]


__all__ = [
    "CODES",
    "REMOTE_KEYS",
    "SIM_SUBMIT_KEYS",
    "SUBMIT_KEYS",
    "BridgeRequestError",
    "check_config",
    "load_remote",
    "parse_remote",
    "serve_families",
    "submit",
]
