"""The operator console: an HTTP API and a static page on `tether serve` (stdlib HTTP server,
one thread per client) under the listener policy every network listener shares.

Rules (each answer is JSON; an error is ``{"code", "message"}`` with a stable code from
`CODES`, and a refused request changes nothing):

- Where it binds: loopback unless `[tls]` is configured (`ListenerPolicy`: else
  `insecure_listener` at start). With TLS it serves HTTPS only and its cookie is `Secure`.
- Every request: a credential-like query parameter is refused (`secret_in_url`); on loopback
  a ``Host`` that is not a loopback name is refused (`host_not_loopback`: DNS rebinding).
  Every answer carries ``Content-Security-Policy: default-src 'self'; ...; frame-ancestors
  'none'``, ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer``; API answers ``Cache-Control: no-store``.
- Every POST: a JSON object body (``Content-Type: application/json``, at most 64 KiB:
  `not_json`, `body_too_large`, `bad_request`), and an ``Origin``, when sent, that is this
  console's own (`origin_refused`). A cross-site form can send neither JSON nor the headers
  below without a CORS preflight, which this server never grants.
- Login (`POST /api/login {"credential"}`): a named operator's own credential, verified by the
  daemon's `Authenticator` (role `operator`), failures rate-limited per peer address
  (``net:<addr>``, never the local CLI's bucket; `credential_rate_limited`, 429 with
  ``Retry-After``). The answer sets the session cookie and gives the session's CSRF token.
- Every other state-changing request (logout, resolve, device actions, resume) needs the
  session cookie (`session_required`) and its CSRF token in ``X-CSRF-Token``
  (`csrf_refused`). The operator recorded is the session's.
- Reads (`/api/decisions`, `/api/decision`, `/api/status`, `/api/activities`, `/api/live`) need
  the session when the console is not on loopback; on loopback they need none, as the AG-UI
  stream's rule is.
- Resolve (`POST /api/resolve {"key", "decision", "revision", "note"}`): refused on a read-back
  older than `console_max_evidence_age_s` (`evidence_too_old`; `wait` records nothing and is
  not refused), then exactly `tether.operator.decisions.resolve` on the daemon's catalog and
  the family's device review, the call `tether operator resolve` reaches through the daemon:
  the catalog refuses a stale revision (`stale_revision`), a changed device records a new
  revision and refuses (`state_changed`). A refusal of either kind carries the current
  evidence (`current`) and its difference from the revision the console showed before.
- Device actions (`POST /api/device {"robot", "action"}`) are not decisions: `reboot` (clears
  a hardware error; needs `"arm_supported": true`, else `reboot_unconfirmed`), `reread` (a
  fresh read-back). Each records a new evidence revision, through the core's
  `refresh_evidence`, for every parked Activity of that robot. `resume` clears a stop latch.
- Stop (`POST /api/stop {"robot"?}`, header ``X-Tether-Stop: 1`` always) is the daemon's own
  stop path (no storage but the latch file) and is never rate-limited and never waits on a
  session's lock. From a loopback peer of a loopback console it needs nothing else (the Host
  check still applies). Elsewhere one of: a live session and its CSRF token, or
  ``Authorization: Bearer <token>`` where the token is `console_stop_token` (hashed in
  `[serve]`) or a principal's whose role may stop (a planner). A stop token is checked without
  the rate limiter, so guessing at stop tokens never locks an operator out of Stop; argon2id's
  cost bounds the guessing rate.
- The page's live feed (`GET /api/live`, SSE) renders the daemon's Activities as the Rust
  `ActivityStore` materialises them: each connection subscribes to the daemon's `RunStream`
  (its first frames are the daemon's store snapshot) and feeds a store of its own with the
  same frames in order, sending the page whole messages (`upsert`) or the whole list
  (`reset`): the page applies no AG-UI rule, it only replaces messages by id. A connection
  ends after `LIVE_MAX_S` (the page's EventSource reconnects and gets a fresh snapshot), so a
  long-lived page holds no settled Activity the daemon has forgotten for long.
"""

from __future__ import annotations

import json
import logging
import queue
import ssl
import threading
import time
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import parse_qs, urlsplit

from tether._coded import CodedError
from tether._listen import (
    ListenerPolicy,
    PolicyHTTPServer,
    Refusal,
    TlsConfig,
    log_target,
    peer_gone,
    refusal_body,
)
from tether.agui import ActivityStore
from tether.console import evidence as ev
from tether.console.config import ConsoleConfig
from tether.console.sessions import COOKIE, Session, Sessions, cookie, expired_cookie
from tether.devices.credentials import (
    CredentialError,
    Principal,
    stored_cost,
)
from tether.devices.latch import stopped_by
from tether.errors import TetherError
from tether.operator import decisions

if TYPE_CHECKING:
    from tether.serve.daemon import Daemon

log = logging.getLogger("tether.console")

MAX_BODY: Final = 64 * 1024
#: A live connection ends after this long (the page reconnects: a fresh snapshot).
LIVE_MAX_S: Final = 300.0
#: How often a live connection looks at the parked decisions and at the devices.
PARKED_EVERY_S: Final = 0.5
DEVICES_EVERY_S: Final = 1.0
#: Activity updates to the page are coalesced for this long at most.
COALESCE_S: Final = 0.05
KEEPALIVE_S: Final = 10.0

CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
STOP_HEADER: Final = "X-Tether-Stop"
#: The latch's `by` of a console stop; "by operator NAME", "by console_stop_token" or "by
#: ROLE NAME" follows when the request names who sent it (a session, a stop token).
CONSOLE_STOP: Final = "console Stop"
CSRF_HEADER: Final = "X-CSRF-Token"
STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
#: The API's paths and the one method each is served to (the static files are GET's too): a
#: served path asked with another method is `method_not_allowed` (405, its `Allow`), not 404.
API_METHODS: Final = {
    "/api/session": "GET",
    "/api/decisions": "GET",
    "/api/decision": "GET",
    "/api/status": "GET",
    "/api/activities": "GET",
    "/api/live": "GET",
    "/api/stop": "POST",
    "/api/login": "POST",
    "/api/logout": "POST",
    "/api/resolve": "POST",
    "/api/device": "POST",
}
NOTICE: Final = (
    "This Stop is a software stop: Tether asks each robot to hold or go limp and latches it. "
    "It is not an emergency stop; use the robot's own emergency stop for an emergency."
)

#: Every `.code` a console answer can carry, with its HTTP status (besides the catalog's and
#: the operator decision's rejection codes, which are 409, and the device host's).
CODES: Final[dict[str, HTTPStatus]] = {
    "bad_request": HTTPStatus.BAD_REQUEST,
    "secret_in_url": HTTPStatus.BAD_REQUEST,
    "not_json": HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    "body_too_large": HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    "session_required": HTTPStatus.UNAUTHORIZED,
    "credential_refused": HTTPStatus.UNAUTHORIZED,
    "credential_ambiguous": HTTPStatus.UNAUTHORIZED,
    "stop_refused": HTTPStatus.UNAUTHORIZED,
    "role_refused": HTTPStatus.FORBIDDEN,
    "csrf_refused": HTTPStatus.FORBIDDEN,
    "origin_refused": HTTPStatus.FORBIDDEN,
    "host_not_loopback": HTTPStatus.FORBIDDEN,
    "stop_header_required": HTTPStatus.FORBIDDEN,
    "not_found": HTTPStatus.NOT_FOUND,
    "unknown_robot": HTTPStatus.NOT_FOUND,
    "unknown_activity": HTTPStatus.NOT_FOUND,
    "method_not_allowed": HTTPStatus.METHOD_NOT_ALLOWED,
    "evidence_too_old": HTTPStatus.CONFLICT,
    "reboot_unconfirmed": HTTPStatus.CONFLICT,
    "unknown_joint": HTTPStatus.BAD_REQUEST,
    "bad_operation_id": HTTPStatus.BAD_REQUEST,
    "credential_rate_limited": HTTPStatus.TOO_MANY_REQUESTS,
    "daemon_starting": HTTPStatus.SERVICE_UNAVAILABLE,
    "listener_busy": HTTPStatus.SERVICE_UNAVAILABLE,
    "device_unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "internal_error": HTTPStatus.INTERNAL_SERVER_ERROR,
}
DEVICE_ACTIONS: Final = ("reboot", "reread", "resume")


class ConsoleError(CodedError):
    """A console request refused; `code` is a key of `CODES` or an operator rejection code."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(code, message, details=details)


def status_of(code: str) -> HTTPStatus:
    if code in CODES:
        return CODES[code]
    if code in decisions.REJECTION_CODES:
        return HTTPStatus.CONFLICT
    return HTTPStatus.CONFLICT


def _static(name: str) -> bytes:
    return resources.files("tether.console").joinpath("static", name).read_bytes()


class Console:
    """The console of one `Daemon` (see the module rules); `close()` releases its port.

    Raises:
        ListenerError: the listener policy refused the address (`insecure_listener`, TLS).
        OSError: the address could not be bound.
    """

    def __init__(
        self,
        daemon: Daemon,
        config: ConsoleConfig,
        *,
        tls: TlsConfig | None = None,
    ) -> None:
        assert config.address is not None
        self.daemon = daemon
        self.config = config
        self.authenticator = daemon.config.authenticator()
        self.policy = ListenerPolicy(
            config.address, tls, self.authenticator, require_principal=False
        )
        self.sessions = Sessions(config.session_s)
        self.seen = ev.Seen()
        # What every live feed polls, read once for all of them (`_shared`): each feed read
        # the devices (a read-back on the bus the moves use) and the catalog on its own, so
        # many open pages loaded the bus and the store with reads of the same thing.
        self._shared_lock = threading.Lock()
        self._shared: dict[str, tuple[float, Any, Any]] = {}
        self._stop_token = (
            None
            if config.stop_token is None
            else Principal(
                "console_stop_token",
                "planner",
                config.stop_token,
                stored_cost(config.stop_token, where="serve.console_stop_token"),
                table="serve",
            )
        )
        self._httpd = PolicyHTTPServer(self.policy, _handler(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="tether-console", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"{self.policy.scheme}://{shown}:{port}/"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    # --- the daemon's state, as the page sees it ---

    def _runtime(self) -> Any:
        return self.daemon.host()

    def _shared_read(self, name: str, max_age_s: float, read: Any, key: Any = None) -> Any:
        """`read()`, or its answer read at most `max_age_s` ago under the same `key`; one read
        at a time (the others wait for it and take its answer)."""
        with self._shared_lock:
            held = self._shared.get(name)
            if held is not None and held[1] == key and time.monotonic() - held[0] < max_age_s:
                return held[2]
            value = read()
            self._shared[name] = (time.monotonic(), key, value)
            return value

    def parked_signature(self) -> list[tuple[str, int]]:
        def read() -> list[tuple[str, int]]:
            runtime = self._runtime()
            return [
                (decisions.format_key(r.key), r.evidence_revision)
                for r in runtime.catalog.iter_awaiting_decision()
            ]

        return list(self._shared_read("parked", PARKED_EVERY_S / 2, read))

    def decision(self, key: str) -> dict[str, Any]:
        runtime = self._runtime()
        shown = decisions.show(runtime.catalog, runtime.artifacts, key)
        return ev.view(shown, self.seen, max_age_s=self.config.max_evidence_age_s)

    def parked(self) -> list[dict[str, Any]]:
        out = []
        for key, _rev in self.parked_signature():
            try:
                out.append(self.decision(key))
            except TetherError as exc:  # decided meanwhile, or its document is unreadable
                log.debug("parked view failed", extra={"key": key, "error": str(exc)})
        return out

    def devices(self) -> list[dict[str, Any]]:
        """Each robot's status (a fresh read-back), shared by every page that asks within
        half of `DEVICES_EVERY_S`."""

        robots = sorted(self.daemon.config.robots)

        def read() -> list[dict[str, Any]]:
            return [self.daemon.device_status(n) for n in robots]

        # A stop or a resume since the last read is read at once: a page that stopped a
        # robot took an older read's "not latched" for a resume and dropped its stop report.
        devices = self.daemon.devices
        latched = None if devices is None else tuple(devices.latched(n) for n in robots)
        return list(self._shared_read("devices", DEVICES_EVERY_S / 2, read, latched))

    def activities(self) -> list[dict[str, Any]]:
        """The daemon's store's activity messages as they stand (its snapshot frame)."""
        stream = self.daemon.stream
        if stream is None:
            return []
        sub = stream.subscribe()
        try:
            store = ActivityStore()
            while True:
                try:
                    frames = sub.take(timeout=0)
                except queue.Empty:
                    break
                if frames is None:
                    break
                for event in parse_frames(frames)[0]:
                    store.handle_event(event)
            return store.activities()
        finally:
            stream.unsubscribe(sub)

    # --- actions ---

    def resolve(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        key = _field(body, "key", str)
        decision = _field(body, "decision", str)
        revision = _field(body, "revision", int)
        note = body.get("note", "")
        if not isinstance(note, str) or len(note) > 2000:
            raise ConsoleError("bad_request", "`note` must be a string of at most 2000 characters")
        if decision not in decisions.DECISIONS:
            raise ConsoleError(
                "bad_request",
                f"`decision` must be one of {', '.join(decisions.DECISIONS)}",
                field="decision",
            )
        runtime = self._runtime()
        if decision != "wait":
            current = self.decision(key)
            age = current.get("read_back_age_ms")
            if current["revision"] == revision and isinstance(age, int):
                if age > self.config.max_evidence_age_s * 1000:
                    raise ConsoleError(
                        "evidence_too_old",
                        f"the read-back of revision {revision} is {age / 1000:.0f} s old (more "
                        f"than {self.config.max_evidence_age_s:.0f} s): re-read the device for "
                        "a fresh revision, then decide",
                        current=current,
                    )
        try:
            done = decisions.resolve(
                runtime.catalog,
                runtime.artifacts,
                key,
                decision=decision,
                revision=revision,
                credential=sid,
                verify_credential=self.sessions.operator_of,
                note=note,
                review=self.daemon.review(),
                host=self.daemon.decision_host,
                before_abandon=self.daemon.before_abandon,
            )
        except CodedError as exc:
            if exc.code in ("stale_revision", "state_changed"):
                raise ConsoleError(
                    exc.code, exc.message, **self._refreshed(key, revision)
                ) from None
            raise
        log.info(
            "console decision",
            extra={
                "key": key,
                "decision": decision,
                "revision": revision,
                "operator": done["operator"],
            },
        )
        return done

    def _refreshed(self, key: str, revision: int) -> dict[str, Any]:
        """The current evidence after a refusal, with its difference from `revision`'s."""
        current = self.decision(key)
        shown = self.seen.at(key, revision)
        if shown is not None:
            doc = self.seen.at(key, current["revision"]) or {}
            current["since_previous"] = {
                "revision": revision,
                "fields": ev.difference(shown, doc),
            }
        return {"current": current}

    def device_action(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        robot = _field(body, "robot", str)
        action = _field(body, "action", str)
        if action not in DEVICE_ACTIONS:
            raise ConsoleError(
                "bad_request",
                f"`action` must be one of {', '.join(DEVICE_ACTIONS)}",
                field="action",
            )
        daemon = self.daemon
        daemon.config.robot(robot)  # unknown_robot: nothing is sent
        devices = daemon.devices
        if devices is None:
            raise ConsoleError("daemon_starting", "the daemon is still starting; ask again")
        operator = session.operator
        if action == "resume":
            return devices.resume(robot, operator=operator)
        joints = body.get("joints") or []
        if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
            raise ConsoleError("bad_request", "`joints` must be a list of joint names")
        runtime = self._runtime()
        review = daemon.review()
        if action == "reboot":
            arm_supported = body.get("arm_supported")
            if arm_supported is not True:
                raise ConsoleError(
                    "reboot_unconfirmed",
                    f"a reboot drops torque on {robot}: confirm that the arm is supported",
                    robot=robot,
                )
            if robot not in devices.identities:
                devices.connect(robot)
            done = devices.reboot(robot, joints, operator=operator, arm_supported=True)
            fresh = done["read_back"]
            change = f"rebooted by {operator} (ids {done['rebooted_ids']}) from the console"
            shown: dict[str, Any] = {k: v for k, v in done.items() if k != "state"}
        else:
            if robot not in devices.identities:
                raise ConsoleError("device_unavailable", f"robot {robot} is not connected")
            dtype = devices.device_type(robot)
            state = dtype.read_state(devices._bus(robot), daemon.config.robot(robot))
            fresh = dtype.si_state(daemon.config.robot(robot), state)
            change = f"re-read by {operator} from the console"
            shown = {"robot": robot, "operator": operator, "read_back": fresh}
        refreshed = decisions.refresh_for_robot(
            runtime.catalog, runtime.artifacts, robot, fresh, change, review=review
        )
        log.info(
            "console device action", extra={"robot": robot, "action": action, "operator": operator}
        )
        return {**shown, "action": action, "refreshed": refreshed}

    def stop(self, body: dict[str, Any], *, by: str = CONSOLE_STOP) -> list[dict[str, Any]]:
        """Stop the named robot, or every one, latched as stopped ``by`` (who sent it, as
        `tether operator resume` and `tether status` show it)."""
        robot = body.get("robot")
        if robot is not None and (not isinstance(robot, str) or not robot):
            raise ConsoleError("bad_request", "`robot` must be a robot's name", field="robot")
        if self.daemon.devices is None:
            raise ConsoleError("daemon_starting", "the daemon is still starting; ask again")
        reports: list[dict[str, Any]] = self.daemon.stop_devices(
            {"robot": robot} if robot else {}, by=by
        )
        return reports

    def stop_token_by(self, token: str) -> str | None:
        """Who a stop token is (the latch's `by`), or None when it is none: the
        `console_stop_token`, or a principal's whose role may stop. Checked without the rate
        limiter (Stop is never locked out)."""
        if self._stop_token is not None and self._stop_token.matches(token):
            return f"{CONSOLE_STOP} by console_stop_token"
        for p in self.authenticator.principals.values():
            if p.may("stop") and p.matches(token):
                return stopped_by(CONSOLE_STOP, p.role, p.name)
        return None

    def login(self, body: dict[str, Any], peer: str) -> tuple[str, Session]:
        secret = body.get("credential")
        if not isinstance(secret, str) or not secret:
            raise ConsoleError("bad_request", "`credential` must be a non-empty string")
        name = body.get("operator")
        try:
            principal = self.authenticator.authenticate(
                secret, roles=("operator",), source=f"net:{peer}"
            )
        except CredentialError as exc:
            if exc.code == "role_refused":
                # A valid secret of another role (a planner's token, an observer's): answered
                # as any wrong one, never confirming it or naming whose it is.
                raise ConsoleError("credential_refused", "a valid credential is required") from None
            details = {k: v for k, v in exc.details.items() if k == "retry_after_s"}
            raise ConsoleError(exc.code, exc.message, **details) from None
        if isinstance(name, str) and name and name != principal.name:
            raise ConsoleError("credential_refused", "a valid credential is required")
        log.info("console login", extra={"operator": principal.name, "peer": peer})
        return self.sessions.create(principal.name)


def _field(body: dict[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) or (kind is str and not value):
        what = "an integer" if kind is int else "a non-empty string"
        raise ConsoleError("bad_request", f"`{name}` must be {what}", field=name)
    return value


def parse_frames(data: bytes) -> tuple[list[dict[str, Any]], str | None]:
    """The events of joined SSE frames (comments skipped) and the last id among them."""
    events: list[dict[str, Any]] = []
    last: str | None = None
    for frame in data.split(b"\n\n"):
        payload = None
        for line in frame.split(b"\n"):
            if line.startswith(b"id: "):
                last = line[4:].decode()
            elif line.startswith(b"data: "):
                payload = line[6:]
        if payload is not None:
            events.append(json.loads(payload))
    return events, last


def _device_facts(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The device documents without their read-backs' read times (what a change is)."""
    out = []
    for d in devices:
        read = d.get("read_back")
        if isinstance(read, dict):
            d = {**d, "read_back": {k: v for k, v in read.items() if k != "read_at_ms"}}
        out.append(d)
    return out


def _sse(name: str, doc: Any) -> bytes:
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return f"event: {name}\ndata: {data}\n\n".encode()


def _handler(console: Console) -> type[BaseHTTPRequestHandler]:
    policy = console.policy

    class Handler(BaseHTTPRequestHandler):
        timeout = 30.0
        protocol_version = "HTTP/1.1"
        _raw: bytes | None = None  # the request body, once read

        def log_message(self, format: str, *args: Any) -> None:
            """Nothing goes to stderr: the request line may carry a refused secret."""

        # --- answers ---

        def _headers(
            self, status: int, ctype: str, length: int | None, extra: dict[str, str]
        ) -> None:
            self.send_response(status)
            for name, value in SECURITY_HEADERS.items():
                self.send_header(name, value)
            self.send_header("Content-Type", ctype)
            if length is not None:
                self.send_header("Content-Length", str(length))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()

        def _json(self, status: int, doc: Any, extra: dict[str, str] | None = None) -> None:
            body = json.dumps(doc, allow_nan=False).encode()
            self._headers(
                status,
                "application/json",
                len(body),
                {"Cache-Control": "no-store", **(extra or {})},
            )
            self.wfile.write(body)

        def _error(self, exc: CodedError, extra: dict[str, str] | None = None) -> None:
            doc: dict[str, Any] = {"code": exc.code, "message": exc.message}
            doc.update({k: v for k, v in exc.details.items() if k in ("current", "field")})
            headers = dict(extra or {})
            retry = exc.details.get("retry_after_s")
            if isinstance(retry, int | float):
                headers["Retry-After"] = str(max(1, int(retry + 0.999)))
                doc["retry_after_s"] = retry
            status = status_of(exc.code)
            # A refused request's body may be unread: the connection cannot carry another.
            self.close_connection = True
            headers["Connection"] = "close"
            if status == HTTPStatus.UNAUTHORIZED:
                headers.setdefault("WWW-Authenticate", 'Bearer realm="tether-console"')
            allow = exc.details.get("allow")
            if status == HTTPStatus.METHOD_NOT_ALLOWED and isinstance(allow, str):
                headers["Allow"] = allow
                doc["allow"] = allow
            self._json(status, doc, headers)

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """What the server itself refuses before a handler runs (a malformed request line,
            a method no handler serves, an oversized header) is JSON too, as every answer of
            the API: ``{"code", "message"}``, never the server's HTML page."""
            body, status, extra = refusal_body(code, message, self.command)
            self.close_connection = True
            try:
                self._headers(
                    status,
                    "application/json",
                    len(body),
                    {"Cache-Control": "no-store", "Connection": "close", **extra},
                )
                if self.command != "HEAD":
                    self.wfile.write(body)
            except OSError:
                pass

        # --- request parts ---

        def _peer(self) -> str:
            return str(self.client_address[0])

        def _peer_loopback(self) -> bool:
            import ipaddress

            try:
                return ipaddress.ip_address(self._peer()).is_loopback
            except ValueError:
                return False

        def _sid(self) -> str | None:
            raw = self.headers.get("Cookie")
            if not raw:
                return None
            try:
                jar = SimpleCookie(raw)
            except CookieError:
                return None
            morsel = jar.get(COOKIE)
            return morsel.value if morsel is not None and morsel.value else None

        def _session(self) -> tuple[str, Session] | None:
            sid = self._sid()
            session = console.sessions.get(sid)
            return None if session is None or sid is None else (sid, session)

        def _require_session(self, *, csrf: bool) -> tuple[str, Session]:
            found = self._session()
            if found is None:
                raise ConsoleError(
                    "session_required", "log in first (the session is missing or expired)"
                )
            if csrf and not found[1].csrf_ok(self.headers.get(CSRF_HEADER)):
                raise ConsoleError(
                    "csrf_refused", f"the {CSRF_HEADER} header must carry this session's token"
                )
            return found

        def _require_read(self) -> None:
            if not policy.loopback:
                self._require_session(csrf=False)

        def _check_origin(self) -> None:
            origin = self.headers.get("Origin")
            if origin is None:
                return
            host = self.headers.get("Host") or ""
            if origin != f"{policy.scheme}://{host}":
                raise ConsoleError("origin_refused", "a request from another origin is refused")

        def _body(self) -> dict[str, Any]:
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            data = self._read_body()
            if ctype != "application/json":
                raise ConsoleError(
                    "not_json", "a request body is JSON (Content-Type: application/json)"
                )
            try:
                doc = json.loads(data or b"{}")
            except ValueError:
                raise ConsoleError("bad_request", "the body is not JSON") from None
            except RecursionError:  # within the size bound, nested past the parser's depth
                raise ConsoleError("bad_request", "the body's JSON is nested too deep") from None
            if not isinstance(doc, dict):
                raise ConsoleError("bad_request", "the body must be a JSON object")
            return doc

        def _read_body(self) -> bytes:
            """The request body, read once before anything is answered: a refusal that left
            it unread would close a connection with data pending, and the peer could lose the
            answer to the reset that follows."""
            if self._raw is None:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length < 0:
                    raise ConsoleError("bad_request", "a bad Content-Length")
                if length > MAX_BODY:
                    if length <= 16 * MAX_BODY:  # drained, so the refusal arrives
                        self.rfile.read(length)
                    raise ConsoleError(
                        "body_too_large", f"a request body is at most {MAX_BODY} bytes"
                    )
                self._raw = self.rfile.read(length) if length > 0 else b""
            return self._raw

        def _common(self) -> None:
            """Who may ask at all: no secret in the URL, a loopback Host on loopback."""
            policy.check_target(self.path)
            if policy.loopback:
                policy.authorize(self.headers, target=self.path)

        # --- dispatch ---

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def _dispatch(self, method: str) -> None:
            path = urlsplit(self.path).path
            self._raw = None
            try:
                try:
                    if method != "GET":
                        self._read_body()
                    self._common()
                    served = "GET" if path in STATIC else API_METHODS.get(path)
                    if served is not None and served != method:
                        raise ConsoleError(
                            "method_not_allowed",
                            f"{path} is served to {served} only, not {method}",
                            allow=served,
                        )
                    if method == "GET":
                        self._get(path)
                    elif method == "POST":
                        self._post(path)
                    else:
                        raise ConsoleError("method_not_allowed", f"{method} is not served")
                except Refusal as refusal:
                    raise ConsoleError(refusal.code, refusal.message) from None
            except ConsoleError as exc:
                self._error(exc)
            except CodedError as exc:
                self._error(exc)
            except TetherError as exc:
                code = getattr(exc, "code", None)
                message = getattr(exc, "message", None) or str(exc)
                self._error(
                    ConsoleError(code if isinstance(code, str) else "internal_error", message)
                )
            except (BrokenPipeError, ConnectionResetError, TimeoutError, ssl.SSLError):
                self.close_connection = True
            except Exception:
                log.exception("console request failed", extra={"path": log_target(self.path)})
                try:
                    self._error(
                        ConsoleError("internal_error", "the console failed; see the daemon log")
                    )
                except OSError:
                    self.close_connection = True

        def _get(self, path: str) -> None:
            if path in STATIC:
                name, ctype = STATIC[path]
                body = _static(name)
                self._headers(HTTPStatus.OK, ctype, len(body), {"Cache-Control": "no-cache"})
                self.wfile.write(body)
                return
            if path == "/api/session":
                found = self._session()
                doc: dict[str, Any] = {
                    "logged_in": found is not None,
                    "loopback": policy.loopback,
                    "notice": NOTICE,
                    "max_evidence_age_s": console.config.max_evidence_age_s,
                }
                if found is not None:
                    # Never the CSRF token: a cookie goes to every port of this host (another
                    # local user's server may hold it), and it alone must not fetch the token.
                    # The page keeps the token its login answered, in its origin's storage.
                    session = found[1]
                    doc.update(operator=session.operator, expires_ms=session.expires_ms)
                self._json(HTTPStatus.OK, doc)
                return
            self._require_read()
            query = parse_qs(urlsplit(self.path).query)
            if path == "/api/decisions":
                self._json(HTTPStatus.OK, {"decisions": console.parked()})
            elif path == "/api/decision":
                ids = query.get("id") or []
                if len(ids) != 1 or not ids[0]:
                    raise ConsoleError(
                        "bad_request", "give one `id` (world/kind/activity)", field="id"
                    )
                self._json(HTTPStatus.OK, console.decision(ids[0]))
            elif path == "/api/status":
                self._json(HTTPStatus.OK, {"devices": console.devices(), "notice": NOTICE})
            elif path == "/api/activities":
                self._json(HTTPStatus.OK, {"activities": console.activities()})
            elif path == "/api/live":
                self._live()
            else:
                raise ConsoleError("not_found", f"nothing is served at {path}")

        def _post(self, path: str) -> None:
            self._check_origin()
            if path == "/api/stop":
                self._stop()
                return
            body = self._body()
            if path == "/api/login":
                sid, session = console.login(body, self._peer())
                secure = policy.ssl_context is not None
                self._json(
                    HTTPStatus.OK,
                    {
                        "operator": session.operator,
                        "csrf": session.csrf,
                        "expires_ms": session.expires_ms,
                    },
                    {
                        "Set-Cookie": cookie(
                            sid, max_age_s=int(console.config.session_s), secure=secure
                        )
                    },
                )
                return
            sid, session = self._require_session(csrf=True)
            if path == "/api/logout":
                console.sessions.drop(sid)
                secure = policy.ssl_context is not None
                self._json(
                    HTTPStatus.OK,
                    {"logged_out": session.operator},
                    {"Set-Cookie": expired_cookie(secure=secure)},
                )
            elif path == "/api/resolve":
                self._json(HTTPStatus.OK, console.resolve(sid, body))
            elif path == "/api/device":
                self._json(HTTPStatus.OK, console.device_action(session, body))
            else:
                raise ConsoleError("not_found", f"nothing is served at {path}")

        def _stop(self) -> None:
            if self.headers.get(STOP_HEADER) != "1":
                raise ConsoleError(
                    "stop_header_required", f"a stop request carries the header `{STOP_HEADER}: 1`"
                )
            session = self._session()
            # Who stopped, as the latch records it: the session's operator, the stop token's
            # holder, or (on a loopback console, which asks for neither) the console itself.
            by = (
                CONSOLE_STOP
                if session is None
                else stopped_by(CONSOLE_STOP, "operator", session[1].operator)
            )
            if not (policy.loopback and self._peer_loopback()):
                auth = (self.headers.get("Authorization") or "").strip()
                scheme, _, token = auth.partition(" ")
                if scheme.lower() == "bearer" and token.strip():
                    holder = console.stop_token_by(token.strip())
                    if holder is None:
                        raise ConsoleError("stop_refused", "this is not a stop token")
                    by = holder
                else:
                    self._require_session(csrf=True)
            body = self._body() if self._read_body() else {}
            t0 = time.monotonic()
            reports = console.stop(body, by=by)
            log.info(
                "console stop",
                extra={"robots": [r.get("robot") for r in reports], "peer": self._peer()},
            )
            self._json(
                HTTPStatus.OK,
                {
                    "stopped": reports,
                    "latched": True,
                    "elapsed_ms": round((time.monotonic() - t0) * 1000, 1),
                    "notice": NOTICE,
                },
            )

        def _live(self) -> None:
            server = cast("PolicyHTTPServer", self.server)
            if not server.take_stream():
                # The page's stop and decisions keep connections of their own, whatever the
                # live feeds hold (256 of them made the stop itself `listener_busy`).
                raise ConsoleError(
                    "listener_busy",
                    "too many live feeds are open on this console: close a page, or try again"
                    " later (stops and decisions are still served)",
                )
            try:
                self._live_feed()
            finally:
                server.end_stream()

        def _live_feed(self) -> None:
            self._headers(
                HTTPStatus.OK,
                "text/event-stream; charset=utf-8",
                None,
                {"Cache-Control": "no-store", "Connection": "close"},
            )
            self.close_connection = True
            sid = self._sid()
            # On loopback the stream needs no session; one it was opened with that ends (a
            # logout elsewhere, its lifetime, a restart) is still said, once, so the page
            # stops showing an operator logged in.
            logged_in = sid is not None and console.sessions.get(sid) is not None
            stream = console.daemon.stream
            store = ActivityStore()
            sub = stream.subscribe() if stream is not None else None
            last_id: str | None = None
            began = time.monotonic()
            parked_sig: Any = None
            devices_doc: Any = None
            next_parked = next_devices = 0.0
            last_write = last_flush = time.monotonic()

            def feed(data: bytes) -> tuple[set[str], bool]:
                nonlocal last_id
                events, last = parse_frames(data)
                if last is not None:
                    last_id = last
                changed: set[str] = set()
                reset = False
                for event in events:
                    store.handle_event(event)
                    kind = event.get("type")
                    if kind == "MESSAGES_SNAPSHOT":
                        reset = True
                    elif kind in ("ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA"):
                        changed.add(str(event.get("messageId")))
                return changed, reset

            def write(data: bytes) -> None:
                nonlocal last_write
                self.wfile.write(data)
                self.wfile.flush()
                last_write = time.monotonic()

            try:
                self.wfile.write(b"retry: 1000\n\n")
                changed: set[str] = set()
                reset = True
                # The opening frames: the daemon store's snapshot.
                while sub is not None:
                    try:
                        data = sub.take(timeout=0)
                    except queue.Empty:
                        break
                    if data is None:
                        break
                    feed(data)
                write(
                    _sse(
                        "activities",
                        {
                            "reset": True,
                            "activities": store.activities(),
                            "server_ms": int(time.time() * 1000),
                        },
                    )
                )
                reset = False
                while time.monotonic() - began < LIVE_MAX_S:
                    if peer_gone(self.connection):  # its page closed: let it go now
                        return
                    if not policy.loopback and console.sessions.get(sid) is None:
                        write(_sse("session", {"logged_in": False}))
                        return
                    if logged_in and console.sessions.get(sid) is None:
                        logged_in = False
                        write(_sse("session", {"logged_in": False, "loopback": True}))
                    now = time.monotonic()
                    if now >= next_parked:
                        next_parked = now + PARKED_EVERY_S
                        try:
                            sig = console.parked_signature()
                        except TetherError:
                            sig = parked_sig
                        if sig != parked_sig:
                            parked_sig = sig
                            write(
                                _sse(
                                    "parked",
                                    {
                                        "decisions": console.parked(),
                                        "server_ms": int(time.time() * 1000),
                                    },
                                )
                            )
                    if now >= next_devices:
                        next_devices = now + DEVICES_EVERY_S
                        doc = console.devices()
                        # Sent when a device changed, not when only its read time did: the page
                        # rebuilds its cards on each (their Stop buttons too, and the keyboard
                        # focus on one).
                        facts = _device_facts(doc)
                        if facts != devices_doc:
                            devices_doc = facts
                            write(
                                _sse(
                                    "devices",
                                    {"devices": doc, "server_ms": int(time.time() * 1000)},
                                )
                            )
                    if sub is None:
                        time.sleep(0.25)
                    else:
                        deadline = time.monotonic() + 0.25
                        flush_at: float | None = None
                        while True:
                            wait = (
                                flush_at if flush_at is not None else deadline
                            ) - time.monotonic()
                            try:
                                data = sub.take(timeout=max(0.0, wait))
                            except queue.Empty:
                                break
                            if data is None:
                                # Ended (the daemon closes) or dropped: resubscribe or end.
                                if not sub.dropped:
                                    sub = None
                                    break
                                sub = stream.subscribe(last_id) if stream is not None else None
                                if sub is None:
                                    break
                                continue
                            more, was_reset = feed(data)
                            changed |= more
                            reset = reset or was_reset
                            if flush_at is None:  # at once after a quiet spell, else batched
                                flush_at = max(time.monotonic(), last_flush + COALESCE_S)
                            if time.monotonic() >= flush_at:
                                break
                        if reset:
                            write(
                                _sse(
                                    "activities", {"reset": True, "activities": store.activities()}
                                )
                            )
                        elif changed:
                            upsert = [
                                m for m in (store.get(i) for i in sorted(changed)) if m is not None
                            ]
                            write(_sse("activities", {"upsert": upsert}))
                        if reset or changed:
                            last_flush = time.monotonic()
                        changed, reset = set(), False
                    if time.monotonic() - last_write > KEEPALIVE_S:
                        write(b": keepalive\n\n")
            except (BrokenPipeError, ConnectionResetError, TimeoutError, ssl.SSLError, OSError):
                return
            finally:
                if sub is not None and stream is not None:
                    stream.unsubscribe(sub)

    return Handler


__all__ = ["CODES", "CSP", "NOTICE", "Console", "ConsoleError", "parse_frames", "status_of"]
