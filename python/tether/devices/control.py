"""The control channel of a device owner: one JSON request per connection on a 0600 unix socket.

The owner (`tether.devices.host.DeviceHost`) serves named operations (`stop`, `state`,
`resume`, `reboot`, ...); other processes (`tether stop`, `tether operator`) send one request
and read one reply. Each connection is served on its own thread, so an idle client cannot
delay a stop. A handler's `CodedError` travels back with its code; `send_request` raises it as
a `TransportError` (`owner_refused`, the owner's code in `details["device_code"]`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from tether.transport import TransportError

#: Every `.code` raised here.
CODES: Final = ("owner_no_answer", "owner_refused")
#: AF_UNIX paths are limited to about 108 bytes; longer ones move to a short name in /tmp.
_MAX_SOCKET_PATH = 100
#: How long the owner waits for a client's request line.
REQUEST_DEADLINE_S = 5.0

Handler = Callable[[dict[str, Any]], Any]


def socket_path_for(path: Path) -> str:
    """`path`, or a short stand-in under the temp dir when `path` is too long to bind."""
    text = str(path)
    if len(text.encode()) <= _MAX_SOCKET_PATH:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"tether-{os.getuid()}" / f"{digest}.sock")


class ControlServer:
    """Serves control requests on a unix socket (an accept thread, one thread per client)."""

    def __init__(self, path: str, handlers: dict[str, Handler]) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(16)
        self._handlers = handlers
        self._thread = threading.Thread(target=self._serve, name="tether-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._one, args=(conn,), name="tether-control-client", daemon=True
            ).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(REQUEST_DEADLINE_S)
                with conn.makefile("r") as reader:
                    request = json.loads(reader.readline())
                handler = self._handlers[str(request.get("op"))]
                reply = {"ok": True, "result": handler(request)}
            except Exception as exc:
                reply = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "code": getattr(exc, "code", None),
                }
            try:
                conn.settimeout(REQUEST_DEADLINE_S)
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError:
                pass

    def close(self) -> None:
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def send_request(socket_path: str, request: dict[str, Any], timeout: float = 10.0) -> Any:
    """One request to an owner's control socket; its result, or a `TransportError`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(socket_path)
            sock.sendall((json.dumps(request) + "\n").encode())
            with sock.makefile("r") as reader:
                line = reader.readline()
    except OSError as exc:
        raise TransportError(
            "owner_no_answer",
            f"control socket {socket_path}: {exc.__class__.__name__}: {exc}",
            details={"socket": socket_path},
        ) from exc
    if not line:
        raise TransportError(
            "owner_no_answer",
            f"control socket {socket_path}: closed without answering",
            details={"socket": socket_path},
        )
    reply = json.loads(line)
    if not reply.get("ok"):
        raise TransportError(
            "owner_refused",
            f"the owner refused: {reply.get('error')}",
            details={"socket": socket_path, "device_code": reply.get("code")},
        )
    return reply.get("result")


__all__ = ["CODES", "ControlServer", "send_request", "socket_path_for"]
