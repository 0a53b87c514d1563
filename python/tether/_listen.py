"""The one policy every network listener applies: where it may bind, TLS, and who may connect.

The SSE stream uses it today; the gRPC, HTTP and WebSocket listeners of later issues build the
same `ListenerPolicy` and call the same checks. The local control socket is not a network
listener: it is guarded by its 0600 mode, its 0700 state dir and the peer's uid (SO_PEERCRED,
`tether.devices.control`).

Rules:
- A listener binds to loopback unless TLS is configured: a non-loopback address (a routable
  address, ``0.0.0.0``, ``::``, a host name that is not only loopback) without TLS is refused
  at construction, before a socket is opened (`insecure_listener`, naming the address).
- With TLS (`TlsConfig`: a certificate chain and its key, the host.toml `[tls]` table) the
  listener serves TLS 1.2 or later only. The key file must be owned by the daemon's uid and
  mode 0600 (no group or other bit), else `insecure_tls_key`; a certificate or key that cannot
  be loaded is `tls_unusable`, and so is a certificate that expired (every client would refuse
  its handshake). Both are checked when the policy is built (a listener that takes the PEM pair
  itself, such as gRPC's, gets it from `TlsConfig.pem()`, checked alike). A certificate that
  expires within `EXPIRY_WARNING_DAYS`, or is not valid yet by this host's clock (a robot
  with no real-time clock may start in 1970: the clients judge by theirs), is logged as a
  warning and served.
- With `[tls] client_ca` (PEM roots) the TLS listener is mutual: every client must present a
  certificate that chains to those roots, or its handshake fails (nothing is served); gRPC
  takes the roots from `TlsConfig.client_roots()`, the HTTP listeners from the context. A
  client_ca that cannot be read or holds no certificate is `tls_unusable` naming
  `tls.client_ca`. A client certificate is transport admission only: the principal of a
  request is still its bearer token.
- A listener that is not on loopback requires a principal on every request:
  ``Authorization: Bearer <token>``, verified by the daemon's `Authenticator` (a listener off
  loopback without one is refused at construction: `no_authenticator`). No header is 401
  (`principal_required`), a wrong token 401 (`credential_refused`), a principal whose role may
  not do this 403 (`role_refused`), too many failures 429 (`credential_rate_limited`, with
  ``Retry-After``).
- On loopback no principal is needed (`require_principal=True` asks for one anyway): every
  local user can already reach the host's devices through the CLI's own checks. To keep a web
  page from reaching a loopback listener through DNS rebinding, a request whose ``Host``
  header names something other than a loopback address or ``localhost`` is refused there
  (403, `host_not_loopback`).
- A secret never goes in a URL: a request whose query string carries a credential-like
  parameter (`SECRET_PARAMS`) is refused 400 (`secret_in_url`) on every listener, before
  anything else is looked at. `log_target` gives the request target without its query, the
  only form a listener may log.
"""

from __future__ import annotations

import _ssl
import ipaddress
import json
import logging
import os
import select
import socket
import ssl
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlsplit

from tether._coded import CodedError
from tether._config import HostConfigError
from tether.devices.credentials import CredentialError, Principal, roles_for

#: Query parameters that name a secret: their presence refuses the request (`secret_in_url`).
SECRET_PARAMS: Final = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "authorization",
        "bearer",
        "credential",
        "key",
        "password",
        "secret",
        "token",
    }
)

log = logging.getLogger("tether.listen")

#: A served certificate that expires within this many days is logged as a warning.
EXPIRY_WARNING_DAYS: Final = 14
#: (certificate path, notAfter) already warned of in this process: once each.
_warned: set[tuple[str, str]] = set()

#: Every `.code` a ListenerError carries (building a policy).
CODES: Final = ("insecure_listener", "insecure_tls_key", "no_authenticator", "tls_unusable")
#: Every `.code` a Refusal carries, with its HTTP status.
REFUSALS: Final[dict[str, HTTPStatus]] = {
    "secret_in_url": HTTPStatus.BAD_REQUEST,
    "principal_required": HTTPStatus.UNAUTHORIZED,
    "credential_refused": HTTPStatus.UNAUTHORIZED,
    "credential_ambiguous": HTTPStatus.UNAUTHORIZED,
    "role_refused": HTTPStatus.FORBIDDEN,
    "host_not_loopback": HTTPStatus.FORBIDDEN,
    "credential_rate_limited": HTTPStatus.TOO_MANY_REQUESTS,
}


class ListenerError(CodedError, OSError):
    """A listener that may not be opened as configured; `code` is one of `CODES`.

    An `OSError` too, so a caller that reports a bind failure reports this one the same way.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in CODES:
            raise ValueError(f"unlisted listener code {code!r}")
        super().__init__(code, message, details=details)
        self.errno = None  # not a system call's failure: no errno to branch on

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Refusal(CodedError):
    """A request refused by the policy: `code` is a key of `REFUSALS`, `status` its HTTP status,
    `headers` what the answer carries (``WWW-Authenticate``, ``Retry-After``)."""

    status: HTTPStatus
    headers: dict[str, str]

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in REFUSALS:
            raise ValueError(f"unlisted refusal code {code!r}")
        super().__init__(code, message, details=details)
        self.status = REFUSALS[code]
        self.headers = {}
        if self.status == HTTPStatus.UNAUTHORIZED:
            self.headers["WWW-Authenticate"] = 'Bearer realm="tether"'
        retry = details.get("retry_after_s")
        if isinstance(retry, int | float):
            self.headers["Retry-After"] = str(max(1, int(retry + 0.999)))


class Authenticates(Protocol):
    """What a listener needs of the daemon's authenticator (`credentials.Authenticator`)."""

    def authenticate(
        self, secret: str | None, *, roles: Iterable[str], source: str = "local"
    ) -> Principal:
        """The principal `secret` belongs to, holding one of `roles` (`CredentialError`);
        failures rate-limited per `source`."""
        ...


@dataclass(frozen=True)
class TlsConfig:
    """The `[tls]` table: the certificate chain (PEM) and its private key (PEM, 0600); with
    `client_ca`, the PEM roots a client's certificate must chain to (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def client_roots(self) -> bytes | None:
        """The `client_ca` roots as PEM bytes (None without mutual TLS), checked to hold at
        least one certificate.

        Raises:
            ListenerError: `tls_unusable`, naming `tls.client_ca`.
        """
        if self.client_ca is None:
            return None
        where = f"tls.client_ca {self.client_ca}"
        try:
            data = self.client_ca.read_bytes()
        except OSError as exc:
            raise ListenerError(
                "tls_unusable", f"{where}: {exc.strerror or exc}", path=str(self.client_ca)
            ) from None
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.load_verify_locations(cadata=data.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__
            raise ListenerError(
                "tls_unusable",
                f"{where} holds no usable PEM certificate ({reason})",
                path=str(self.client_ca),
            ) from None
        if not probe.get_ca_certs():
            raise ListenerError(
                "tls_unusable",
                f"{where} holds no CA certificate",
                path=str(self.client_ca),
            )
        return data

    def check_key(self) -> None:
        """Refuse a key file that is not the daemon's own, mode 0600.

        Raises:
            ListenerError: `insecure_tls_key`, or `tls_unusable` when it cannot be read.
        """
        try:
            info = self.key.stat()
        except OSError as exc:
            raise ListenerError(
                "tls_unusable", f"TLS key {self.key}: {exc.strerror}", path=str(self.key)
            ) from None
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise ListenerError(
                "insecure_tls_key",
                f"TLS key {self.key} must be owned by uid {os.getuid()} and mode 0600 "
                f"(it is uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}): "
                f"chown and chmod 600 {self.key}",
                path=str(self.key),
                uid=info.st_uid,
                mode=f"{stat.S_IMODE(info.st_mode):04o}",
            )

    def check_dates(self, now: float | None = None) -> None:
        """Refuse a leaf certificate (the chain's first) that expired by ``now`` (default: this
        host's clock); warn, once per process, of one that expires within
        `EXPIRY_WARNING_DAYS` or is not valid yet. Read with CPython's own PEM decoder; where
        it is missing, or cannot read what `load_cert_chain` accepted, nothing is checked.

        Raises:
            ListenerError: `tls_unusable`, naming the certificate and its notAfter.
        """
        decode = getattr(_ssl, "_test_decode_cert", None)
        if decode is None:
            return
        try:
            info = decode(str(self.cert))
            begins = ssl.cert_time_to_seconds(info["notBefore"])
            ends = ssl.cert_time_to_seconds(info["notAfter"])
        except (ssl.SSLError, OSError, ValueError, KeyError, TypeError):
            return
        now = time.time() if now is None else now
        if now >= ends:
            raise ListenerError(
                "tls_unusable",
                f"TLS certificate {self.cert} expired on {info['notAfter']}: every client "
                "refuses its handshake; renew it and start again",
                cert=str(self.cert),
                not_after=info["notAfter"],
            )
        seen = (str(self.cert), str(info["notAfter"]))
        if seen in _warned:
            return
        if now < begins:
            _warned.add(seen)
            log.warning(
                "TLS certificate %s is not valid before %s by this host's clock (is the"
                " clock right?): served anyway, clients judge it by theirs",
                self.cert,
                info["notBefore"],
            )
        elif ends - now < EXPIRY_WARNING_DAYS * 86_400:
            _warned.add(seen)
            log.warning(
                "TLS certificate %s expires on %s (in %.1f days): renew it before then",
                self.cert,
                info["notAfter"],
                (ends - now) / 86_400,
            )

    def pem(self) -> tuple[bytes, bytes]:
        """(key, certificate chain) as PEM bytes, the key's file checked first: what a
        listener that takes the pair itself needs (gRPC's `ssl_server_credentials`).

        Raises:
            ListenerError: `insecure_tls_key` or `tls_unusable`.
        """
        self.check_key()
        self.context()  # the pair must load (and match) here too
        return self.key.read_bytes(), self.cert.read_bytes()

    def context(self) -> ssl.SSLContext:
        """A server context for TLS 1.2 or later, the key's file checked first.

        Raises:
            ListenerError: `insecure_tls_key` or `tls_unusable`.
        """
        self.check_key()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            # A key under a passphrase would have OpenSSL ask for it on the terminal (a daemon
            # started there hangs at the prompt) and fail anywhere else: no prompt, its cause.
            context.load_cert_chain(self.cert, self.key, password=_no_passphrase)
        except _EncryptedKey:
            raise ListenerError(
                "tls_unusable",
                f"TLS key {self.key} is encrypted with a passphrase, which a daemon cannot be"
                f" asked for: store it decrypted, mode 0600 (openssl pkey -in {self.key} -out"
                " NEW_KEY)",
                cert=str(self.cert),
                key=str(self.key),
            ) from None
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise ListenerError(
                "tls_unusable",
                f"TLS certificate {self.cert} with key {self.key} cannot be used: {reason}",
                cert=str(self.cert),
                key=str(self.key),
            ) from None
        self.check_dates()
        roots = self.client_roots()
        if roots is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=roots.decode("ascii"))
        return context


class _EncryptedKey(Exception):
    """The key file asked for a passphrase (`_no_passphrase`)."""


def _no_passphrase() -> bytes:
    """`load_cert_chain`'s passphrase callback: called only for an encrypted key, which is
    refused (never a prompt)."""
    raise _EncryptedKey


def address_text(host: str, port: int) -> str:
    """``host:port`` as a listener's address is written: an IPv6 host bracketed."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on loopback only (a name counts when every address it
    resolves to is loopback; ``""``, ``0.0.0.0`` and ``::`` are every interface)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a[4][0]).is_loopback for a in found)


def _host_is_loopback_name(value: str) -> bool:
    host = value.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secret_params(target: str) -> list[str]:
    """The parameters of a request target's query that name a secret (`SECRET_PARAMS`; names
    percent-decoded, trimmed and lowercased), sorted: what `secret_in_url` refuses."""
    query = urlsplit(target).query
    if not query:
        return []
    names = {name.strip().lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    return sorted(names & SECRET_PARAMS)


def log_target(target: str) -> str:
    """A request target as it may be logged: without its query string (nor fragment)."""
    return target.split("?", 1)[0].split("#", 1)[0]


def _header(headers: Mapping[str, str] | Any, name: str) -> str | None:
    """A header by its case-insensitive name (a `Message` is already; a dict is searched)."""
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):
        wanted = name.lower()
        value = next((v for k, v in headers.items() if str(k).lower() == wanted), None)
    return None if value is None else str(value)


class ListenerPolicy:
    """Where a listener binds, its TLS, and who may use it (see the module rules).

    Args:
        address: (host, port) the listener binds.
        tls: the `[tls]` table, or None for plain (loopback only).
        authenticator: the daemon's `credentials.Authenticator`; required off loopback.
        require_principal: ask for a principal even on loopback (default: only off loopback).

    Raises:
        ListenerError: the address is not loopback and there is no TLS (`insecure_listener`)
            or no authenticator (`no_authenticator`); the TLS key or certificate is unusable.
    """

    def __init__(
        self,
        address: tuple[str, int],
        tls: TlsConfig | None = None,
        authenticator: Authenticates | None = None,
        *,
        require_principal: bool | None = None,
    ) -> None:
        host, port = address
        self.address = (host, port)
        self.loopback = is_loopback(host)
        shown = f"[{host}]:{port}" if ":" in host else f"{host or '*'}:{port}"
        if not self.loopback and tls is None:
            raise ListenerError(
                "insecure_listener",
                f"{shown} is not a loopback address: a network listener "
                "binds to loopback (127.0.0.1, ::1) unless [tls] is configured",
                address=shown,
            )
        self.require_principal = (
            (not self.loopback) if require_principal is None else bool(require_principal)
        )
        if self.require_principal and authenticator is None:
            raise ListenerError(
                "no_authenticator",
                f"{shown} requires a principal on every request, and no authenticator "
                "was given to verify one",
                address=shown,
            )
        self.tls = tls
        self.authenticator = authenticator
        self.ssl_context: ssl.SSLContext | None = None if tls is None else tls.context()

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "http" if self.ssl_context is None else "https"

    def check_target(self, target: str) -> None:
        """Refuse a request target whose query carries a secret (`secret_in_url`)."""
        found = secret_params(target)
        if found:
            raise Refusal(
                "secret_in_url",
                "a credential never goes in a URL: send it as `Authorization: Bearer <token>`",
                parameters=found,
            )

    def authorize(
        self,
        headers: Mapping[str, str] | Any,
        *,
        action: str = "read",
        target: str | None = None,
        peer: str | None = None,
    ) -> Principal | None:
        """The principal of one request, or None where none is needed (on loopback).

        Args:
            headers: the request's headers (a mapping or an `email.message.Message`).
            action: what the request does (`credentials.ACTIONS`): the roles allowed it.
            target: the request target (path and query), checked by `check_target`.
            peer: the client's address: failed attempts are rate-limited per address, so a
                network client guessing tokens never locks out the local operator.

        Raises:
            Refusal: with the status to answer (see the module rules).
        """
        if target is not None:
            self.check_target(target)
        if not self.require_principal:
            host = _header(headers, "Host")
            if host is not None and not _host_is_loopback_name(host):
                raise Refusal(
                    "host_not_loopback",
                    "this listener is on loopback and answers only a loopback Host",
                )
            return None
        value = _header(headers, "Authorization")
        if value is None or not value.strip():
            raise Refusal(
                "principal_required",
                "this listener requires a principal: send `Authorization: Bearer <token>`",
            )
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refusal("principal_required", "the Authorization header must be `Bearer <token>`")
        assert self.authenticator is not None  # checked at construction
        try:
            return self.authenticator.authenticate(
                token.strip(), roles=roles_for(action), source=f"net:{peer or 'unknown'}"
            )
        except CredentialError as exc:
            code = exc.code if exc.code in REFUSALS else "credential_refused"
            details = {k: v for k, v in exc.details.items() if k == "retry_after_s"}
            raise Refusal(code, exc.message, **details) from None


def parse_address(text: str, *, where: str, code: str, example: str) -> tuple[str, int] | None:
    """A listener's configured address: `HOST:PORT` (an IP address or ``localhost``; port 0:
    any free one), or None for "off". Whether it may be bound (loopback, or TLS) is the
    `ListenerPolicy`'s rule, applied when the listener starts.

    Raises:
        HostConfigError: `code`, naming `where` and an `example` of the form.
    """
    if text == "off":
        return None
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        if not (port_text.isascii() and port_text.isdigit()):  # int() takes " 80", "8_0"
            raise ValueError(text)
        port = int(port_text)
        if not sep or not host or not 0 <= port <= 65535:
            raise ValueError(text)
        ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        raise HostConfigError(
            code,
            f"{where}: {text!r} is not HOST:PORT (for example {example}) or off",
            details={"value": text},
        ) from None
    return host, port


#: How long a client may take over its TLS handshake (then its connection is dropped).
HANDSHAKE_TIMEOUT_S: Final = 10.0


def refusal_body(
    status: int, message: str | None, method: str | None
) -> tuple[bytes, HTTPStatus, dict[str, str]]:
    """The JSON answer (``{"code", "message"}``), status and extra headers of what an HTTP
    listener's server refuses before a handler runs (`BaseHTTPRequestHandler.send_error`: a
    malformed request line, an unserved method, an oversized header). A method no handler
    serves is `method_not_allowed` (405 with its `Allow`, not 501), anything else
    `bad_request` at its own status."""
    try:
        http = HTTPStatus(status)
    except ValueError:
        http = HTTPStatus.BAD_REQUEST
    code, text, extra = "bad_request", message or http.phrase, {}
    if http == HTTPStatus.NOT_IMPLEMENTED:
        http, code = HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed"
        text = f"{method or 'this method'} is not served"
        extra = {"Allow": "GET, POST"}
    elif http == HTTPStatus.NOT_FOUND:
        code = "not_found"
    body = json.dumps({"code": code, "message": text}).encode()
    return body, http, extra


#: Connections one HTTP listener serves at once (a thread each: an SSE subscriber holds its
#: own for as long as it listens); one more is answered 503 (`listener_busy`) at once.
MAX_CONNECTIONS: Final = 256
#: Of those, the ones a long-lived stream never takes (`PolicyHTTPServer.take_stream`).
STREAM_RESERVE: Final = 32
_BUSY_BODY: Final = json.dumps(
    {
        "code": "listener_busy",
        "message": f"{MAX_CONNECTIONS} connections of this listener are open: close one, or try"
        " again later",
    }
).encode()
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n"
) + _BUSY_BODY


class PolicyHTTPServer(ThreadingHTTPServer):
    """The stdlib HTTP server of a listener under `policy` (the SSE stream, the console): one
    thread per client, at most `max_connections` at once (one more is answered 503
    `listener_busy` by the accepting thread, without a thread of its own: in plain text, within
    a short send timeout; over TLS, whose handshake it would have to wait for, it is closed);
    with TLS the handshake runs in the client's own thread under `HANDSHAKE_TIMEOUT_S`, so a
    client that never finishes it cannot stall the accept loop. A client's broken connection is
    not the server's error, and nothing of it is printed."""

    daemon_threads = True
    allow_reuse_address = True
    max_connections = MAX_CONNECTIONS
    #: The listen backlog (the stdlib's is 5: a burst of clients, a reconnect after a
    #: restart, waited out the kernel's SYN retries, seconds each).
    request_queue_size = 128
    #: Connections streams may never take (`take_stream`): kept for short requests, so a stop
    #: or a decision is served however many streams are open.
    stream_reserve = STREAM_RESERVE

    def __init__(self, policy: ListenerPolicy, handler: type[BaseHTTPRequestHandler]) -> None:
        self.policy = policy
        self._open = 0
        self._streams = 0
        self._open_lock = threading.Lock()
        host = policy.address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host.strip("[]"), policy.address[1]), handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            busy = self._open >= self.max_connections
            if not busy:
                self._open += 1
        if busy:
            if self.policy.ssl_context is None:
                try:
                    request.settimeout(0.2)
                    request.sendall(_BUSY)
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()  # its thread never started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self) -> None:
        with self._open_lock:
            self._open -= 1

    def take_stream(self) -> bool:
        """Count one more long-lived stream (a live feed), or False when streams hold all but
        `stream_reserve` of the connections (then answer `listener_busy`); `end_stream` gives
        it back."""
        with self._open_lock:
            if self._streams >= self.max_connections - self.stream_reserve:
                return False
            self._streams += 1
            return True

    def end_stream(self) -> None:
        with self._open_lock:
            self._streams -= 1

    def finish_request(self, request: Any, client_address: Any) -> None:
        context = self.policy.ssl_context
        if context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            wrapped = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a failed handshake: nothing was served (and nothing is logged)
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client's broken connection is not the server's error (nor printed)."""


#: How often a stream idle for its client checks that the client is still there (`peer_gone`):
#: a client gone is noticed this soon, not at the next write (a keepalive, 10 s apart, whose
#: first write after a close still lands in the socket's buffer).
PEER_CHECK_S: Final = 1.0
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def peer_gone(sock: socket.socket) -> bool:
    """Whether the client of a server-sent stream closed its side (or the connection broke):
    the socket reports a hang-up or an error now (the client sends nothing after its request,
    so its FIN is the only thing it can say). Never blocks; TLS sockets too (the TCP state
    under them is what is read)."""
    try:
        fd = sock.fileno()
    except (OSError, ValueError):
        return True
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, _GONE)
    try:
        return any(events & _GONE for _, events in poller.poll(0))
    except OSError:
        return True


__all__ = [
    "PEER_CHECK_S",
    "peer_gone",
    "refusal_body",
    "parse_address",
    "HANDSHAKE_TIMEOUT_S",
    "PolicyHTTPServer",
    "CODES",
    "REFUSALS",
    "SECRET_PARAMS",
    "Authenticates",
    "ListenerError",
    "ListenerPolicy",
    "Refusal",
    "TlsConfig",
    "is_loopback",
    "log_target",
]
