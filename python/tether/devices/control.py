"""The control channel of a device owner: one JSON request per connection on a 0600 unix socket.

The owner (`tether.devices.host.DeviceHost`) serves named operations (`stop`, `state`,
`resume`, `reboot`, ...); other processes (`tether stop`, `tether operator`) send one request
line and read one reply line. A handler's `CodedError` travels back with its code;
`send_request` raises it as a `TransportError` (`owner_refused`, the owner's code in
`details["device_code"]`).

Rules:
- Only the owner's uid talks to it. The socket is 0600 in a private (0700) directory
  (`tether._dirs.usable_dir`); the server reads each peer's uid (`SO_PEERCRED`) and refuses
  another uid before reading a byte (`peer_refused`, logged with the peer's pid and uid).
  The client checks the socket file's owner before sending and the server's uid after
  connecting (`owner_untrusted`), so a socket planted by another user never hears a request
  and cannot answer one (no fake "held").
- No client can delay another, nor a stop. One selector thread reads every connection
  without blocking; only a complete request line reaches a handler, on a thread of its own.
  Each connection has `deadline_s` from accept to its full request line (`request_deadline`:
  a client that sends half a request, or nothing, is answered and cut off), and a reply is
  written within `deadline_s` or the connection is dropped (a client that never reads).
- Bounded: at most `max_clients` connections are being read; one more evicts the oldest
  (`owner_busy`), so idle connections can never keep a stop out. At most `max_handlers`
  requests run at once per lane (`owner_busy` beyond that); `priority_ops` (`stop`) have a
  lane of their own, so slow `state` or `reboot` requests never take a stop's place.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import selectors
import socket
import stat
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from tether._dirs import usable_dir
from tether.transport import TransportError

#: Every `.code` raised here (the client side).
CODES: Final = ("owner_no_answer", "owner_refused", "owner_untrusted", "socket_in_use")
#: Every code a server reply of its own carries (the handler's codes travel too).
REFUSAL_CODES: Final = (
    "bad_request",
    "owner_busy",
    "peer_refused",
    "request_deadline",
    "request_too_large",
    "unknown_op",
)
#: AF_UNIX paths are limited to about 108 bytes; longer ones move to a short name in /tmp.
_MAX_SOCKET_PATH = 100
#: How long the owner waits for a client's request line, and for a reply to be taken.
REQUEST_DEADLINE_S = 5.0
#: Connections read at once (one more evicts the oldest still sending its request).
MAX_CLIENTS = 64
#: Requests handled at once per lane (priority ops have their own lane).
MAX_HANDLERS = 16
#: The longest request line accepted.
MAX_REQUEST_BYTES = 1 << 20
_PEERCRED = struct.Struct("3i")

Handler = Callable[[dict[str, Any]], Any]
_log = logging.getLogger("tether.control")


def socket_path_for(path: Path) -> str:
    """`path`, or a short stand-in when `path` is too long to bind: in `/tmp/tether-<uid>/`, a
    private directory `ControlServer` refuses when another user created it first. No
    environment variable (`TMPDIR`, `XDG_RUNTIME_DIR`) moves it: a daemon started by a service
    and a `tether stop` from a login shell must name the same socket."""
    text = str(path)
    if len(text.encode()) <= _MAX_SOCKET_PATH:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return str(Path("/tmp") / f"tether-{os.geteuid()}" / f"{digest}.sock")


def daemon_socket(state_dir: Path) -> str:
    """The control socket of `tether serve` for `state_dir` (`socket_path_for` of
    `<state_dir>/serve.sock`): where the daemon binds it, and where clients, `tether stop` and
    a worker checking who owns a port look for it."""
    return socket_path_for(state_dir.resolve() / "serve.sock")


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """The (pid, uid, gid) of the process at the other end of a unix socket (`SO_PEERCRED`)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid


class _Pending:
    __slots__ = ("buf", "deadline")

    def __init__(self, deadline: float) -> None:
        self.buf = bytearray()
        self.deadline = deadline


class ControlServer:
    """Serves control requests on a unix socket: a selector thread reads every client, each
    complete request runs on its own thread (bounded; see the module rules)."""

    def __init__(
        self,
        path: str,
        handlers: dict[str, Handler],
        *,
        deadline_s: float = REQUEST_DEADLINE_S,
        max_clients: int = MAX_CLIENTS,
        max_handlers: int = MAX_HANDLERS,
        priority_ops: tuple[str, ...] = ("stop",),
    ) -> None:
        self.path = path
        self.deadline_s = deadline_s
        self.max_clients = max_clients
        self._handlers = handlers
        self._priority_ops = frozenset(priority_ops)
        self._lanes = {
            True: threading.BoundedSemaphore(max_handlers),
            False: threading.BoundedSemaphore(max_handlers),
        }
        usable_dir(Path(path).parent, what="the control socket's directory")
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):  # never someone's file or link
                raise TransportError(
                    "socket_in_use",
                    f"control socket {path}: something that is not a socket is there",
                    details={"socket": path},
                )
            if _answers(path):  # a live process serves it: never taken from under it
                raise TransportError(
                    "socket_in_use",
                    f"control socket {path}: another process serves it",
                    details={"socket": path},
                )
            os.unlink(path)  # a socket left by a dead owner of this path (ours: the dir is private)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(128)
        self._sock.setblocking(False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pending: OrderedDict[socket.socket, _Pending] = OrderedDict()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="tether-control", daemon=True)
        self._thread.start()

    # --- the selector thread ---

    def _serve(self) -> None:
        try:
            while not self._closed:
                timeout = None
                if self._pending:
                    first = next(iter(self._pending.values())).deadline
                    timeout = max(0.0, first - time.monotonic())
                for key, _ in self._sel.select(timeout):
                    try:
                        if key.data == "listen":
                            self._accept_all()
                        elif key.data == "wake":
                            os.read(self._wake_r, 512)
                        else:
                            self._read(key.fileobj)  # type: ignore[arg-type]
                    except BlockingIOError:
                        pass
                    except Exception:
                        if self._closed:
                            return
                        # One connection's failure must never take the stop channel down.
                        _log.exception("control client failed", extra={"socket": self.path})
                self._expire()
        except Exception:
            if not self._closed:
                _log.exception("control server stopped", extra={"socket": self.path})
        finally:
            for conn in list(self._pending):
                self._drop(conn)
            self._sel.close()

    def _accept_all(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if self._closed:
                    return
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                # Out of descriptors: the oldest pending client makes room, as a new one would.
                _log.warning("control socket: %s", exc.strerror, extra={"socket": self.path})
                if self._pending:
                    oldest = next(iter(self._pending))
                    self._unregister(oldest)
                    self._answer_now(oldest, "owner_busy", "out of descriptors; this was oldest")
                else:
                    time.sleep(0.05)
                return
            conn.setblocking(False)
            try:
                pid, uid, _gid = peer_credentials(conn)
            except OSError:
                conn.close()
                continue
            if uid != os.geteuid():
                _log.warning(
                    "refused a control client of another uid",
                    extra={"socket": self.path, "peer_pid": pid, "peer_uid": uid},
                )
                self._answer_now(
                    conn,
                    "peer_refused",
                    f"this control socket serves uid {os.geteuid()} only, not uid {uid}",
                )
                continue
            while len(self._pending) >= self.max_clients:
                oldest = next(iter(self._pending))
                _log.info("evicted the oldest pending control client", extra={"socket": self.path})
                self._unregister(oldest)
                self._answer_now(oldest, "owner_busy", "too many clients; this one was oldest")
            self._pending[conn] = _Pending(time.monotonic() + self.deadline_s)
            self._sel.register(conn, selectors.EVENT_READ, "client")

    def _read(self, conn: socket.socket) -> None:
        pending = self._pending.get(conn)
        if pending is None:
            return
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)  # the client gave up
            return
        pending.buf += data
        end = pending.buf.find(b"\n")
        if end < 0:
            if len(pending.buf) > MAX_REQUEST_BYTES:
                self._unregister(conn)
                self._answer_now(conn, "request_too_large", f"over {MAX_REQUEST_BYTES} bytes")
            return
        line = bytes(pending.buf[:end])
        self._unregister(conn)
        self._dispatch(conn, line)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            conn, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                return
            self._unregister(conn)
            self._answer_now(
                conn,
                "request_deadline",
                f"no complete request line within {self.deadline_s:g} s",
            )

    def _dispatch(self, conn: socket.socket, line: bytes) -> None:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            self._answer_now(conn, "bad_request", f"not a JSON request line: {exc}")
            return
        op = str(request.get("op"))
        handler = self._handlers.get(op)
        if handler is None:
            known = ", ".join(sorted(self._handlers))
            self._answer_now(conn, "unknown_op", f"no operation {op!r} (known: {known})")
            return
        lane = self._lanes[op in self._priority_ops]
        if not lane.acquire(blocking=False):
            self._answer_now(conn, "owner_busy", f"too many {op} requests in progress")
            return
        threading.Thread(
            target=self._handle,
            args=(conn, handler, request, lane),
            name=f"tether-control-{op}",
            daemon=True,
        ).start()

    def _unregister(self, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass

    def _drop(self, conn: socket.socket) -> None:
        self._unregister(conn)
        conn.close()

    def _answer_now(self, conn: socket.socket, code: str, message: str) -> None:
        """A refusal, sent without blocking (nothing was written before, so it fits)."""
        reply = {"ok": False, "error": message, "code": code}
        try:
            conn.send((json.dumps(reply) + "\n").encode())
        except OSError:
            pass
        conn.close()

    # --- one request ---

    def _handle(
        self,
        conn: socket.socket,
        handler: Handler,
        request: dict[str, Any],
        lane: threading.BoundedSemaphore,
    ) -> None:
        with conn:
            try:
                try:
                    reply = {"ok": True, "result": handler(request)}
                except Exception as exc:
                    reply = {
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}",
                        "code": getattr(exc, "code", None),
                    }
            finally:
                lane.release()
            try:
                conn.settimeout(self.deadline_s)  # a client that never reads is dropped
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._sock.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _untrusted(socket_path: str, message: str, **details: Any) -> TransportError:
    return TransportError(
        "owner_untrusted",
        f"control socket {socket_path}: {message}; nothing was sent",
        details={"socket": socket_path, **details},
    )


def _answers(path: str) -> bool:
    """Whether a process accepts connections on the unix socket at `path` (a stale one, left
    by a process that died, refuses them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def send_request(socket_path: str, request: dict[str, Any], timeout: float = 10.0) -> Any:
    """One request to an owner's control socket; its result, or a `TransportError`.

    Before anything is sent, the socket must be a socket owned by the caller's uid, and the
    process answering it must run as that uid (`owner_untrusted`)."""
    uid = os.geteuid()
    try:
        info = os.stat(socket_path)
    except OSError as exc:
        raise TransportError(
            "owner_no_answer",
            f"control socket {socket_path}: {exc.__class__.__name__}: {exc}",
            details={"socket": socket_path, "sent": False},
        ) from exc
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
        raise _untrusted(
            socket_path,
            f"owned by uid {info.st_uid}, not by you (uid {uid})"
            if stat.S_ISSOCK(info.st_mode)
            else "not a socket",
            owner_uid=info.st_uid,
        )
    sent = False  # whether the whole request went out: the owner may have acted on it
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(socket_path)
            _pid, peer_uid, _gid = peer_credentials(sock)
            if peer_uid != uid:
                raise _untrusted(
                    socket_path, f"answered by uid {peer_uid}, not by you", owner_uid=peer_uid
                )
            try:
                sock.sendall((json.dumps(request) + "\n").encode())
                sent = True
            except (BrokenPipeError, ConnectionResetError):
                pass  # the owner answered (a refusal) and closed before reading: read it
            with sock.makefile("r") as reader:
                line = reader.readline()
    except OSError as exc:
        raise TransportError(
            "owner_no_answer",
            f"control socket {socket_path}: {exc.__class__.__name__}: {exc}",
            details={
                "socket": socket_path,
                "sent": sent,
                "timed_out": isinstance(exc, TimeoutError),
            },
        ) from exc
    if not line:
        raise TransportError(
            "owner_no_answer",
            f"control socket {socket_path}: closed without answering",
            details={"socket": socket_path, "sent": sent},
        )
    reply = json.loads(line)
    if not reply.get("ok"):
        raise TransportError(
            "owner_refused",
            f"the owner refused: {reply.get('error')}",
            details={"socket": socket_path, "device_code": reply.get("code")},
        )
    return reply.get("result")


def owner_code(exc: BaseException) -> str | None:
    """The device owner's own code of `exc` where it is an owner's refusal that names one
    (`send_request`'s ``owner_refused``, the owner's code in ``details["device_code"]``): the
    cause a command says; None for any other error."""
    details = getattr(exc, "details", None)
    if getattr(exc, "code", None) != "owner_refused" or not isinstance(details, dict):
        return None
    owner = details.get("device_code")
    return owner if isinstance(owner, str) and owner else None


def owner_words(message: str, code: str) -> str:
    """The text of an owner's refusal (`send_request`'s ``owner_refused`` message), without
    the channel's prefix, the owner's error class or its code: what the owner said."""
    prefix = "the owner refused: "
    if message.startswith(prefix):
        message = message[len(prefix) :]
        first, sep, rest = message.partition(": ")
        if sep and " " not in first:
            message = rest  # "ClassName: code: text" -> "code: text"
    return message.removeprefix(f"{code}: ")


__all__ = [
    "CODES",
    "MAX_CLIENTS",
    "MAX_HANDLERS",
    "REFUSAL_CODES",
    "REQUEST_DEADLINE_S",
    "ControlServer",
    "daemon_socket",
    "peer_credentials",
    "owner_code",
    "owner_words",
    "send_request",
    "socket_path_for",
]
