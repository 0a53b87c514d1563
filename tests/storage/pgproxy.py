"""A loopback TCP proxy in front of PostgreSQL that can lose one COMMIT or its reply.

`CommitCutter` forwards every byte both ways until armed; then, at the next COMMIT a client
sends (after skipping ``skip`` of them), it either drops the COMMIT and cuts the connection
(the server rolls back: the commit did not land) or forwards it and cuts the connection
instead of forwarding the server's reply (the commit landed, the client never hears). The
client sees the same broken connection either way: an unknown outcome.

The proxy reads the client's side as protocol messages, so it sees a COMMIT however psycopg
sends it: a simple query, or an extended-protocol Bind of a statement parsed as COMMIT (once
psycopg has prepared it, after a few executions, only the Bind is sent). Each COMMIT counts
once, at its Query or Bind, however the client's writes are split into reads here.
"""

from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit

from tether.testing._ports import cut


class CommitCutter:
    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        netloc = f"{parts.username + '@' if parts.username else ''}127.0.0.1:{self.port}"
        # Plain TCP, so the proxy can see a COMMIT go by (libpq prefers TLS where offered).
        query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
        self.url = urlunsplit(parts._replace(netloc=netloc, query=query))
        self._lock = threading.Lock()
        self._mode: str | None = None
        self._skip = 0
        self._times = 0
        self.cuts = 0
        self.commits = 0  # every COMMIT seen, cut or not
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str, *, skip: int = 0, times: int = 1) -> None:
        """``drop_commit`` or ``drop_reply`` at the next COMMIT after ``skip`` of them, and at
        the ``times - 1`` COMMITs after that one."""
        assert mode in ("drop_commit", "drop_reply") and times >= 1
        with self._lock:
            self._mode, self._skip, self._times = mode, skip, times

    def disarm(self) -> None:
        """Forward every COMMIT again (an armed cut that did not happen is dropped)."""
        with self._lock:
            self._mode, self._skip, self._times = None, 0, 0

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            state = {"cut_on_reply": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    _cut = staticmethod(cut)

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        reader = _ClientMessages()
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._cut(server)
                return
            if reader.feed(data):
                with self._lock:
                    self.commits += 1
                    mode = self._mode
                    if mode is not None and self._skip > 0:
                        self._skip -= 1
                        mode = None
                    elif mode is not None:
                        self._times -= 1
                        if self._times <= 0:
                            self._mode = None
                        self.cuts += 1
                if mode == "drop_commit":
                    self._cut(client, server)
                    return
                if mode == "drop_reply":
                    state["cut_on_reply"] = True
            try:
                server.sendall(data)
            except OSError:
                self._cut(client)
                return

    def _down(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                data = b""
            if not data or state["cut_on_reply"]:
                self._cut(client, server)
                return
            try:
                client.sendall(data)
            except OSError:
                self._cut(server)
                return


#: Request codes of the untyped messages a client may send before its startup message.
_PRE_STARTUP = {80877103, 80877104}  # SSLRequest, GSSENCRequest


def _is_commit(sql: bytes) -> bool:
    """Whether ``sql`` is a COMMIT, or a message of statements whose last one is (the store
    sends a transaction's writes and its COMMIT as one message)."""
    text = sql.rstrip(b"\x00").strip().rstrip(b";").strip().upper()
    return text == b"COMMIT" or text.endswith(b"; COMMIT")


class _ClientMessages:
    """The client half of the PostgreSQL wire protocol, message by message (version 3)."""

    def __init__(self) -> None:
        self._buf = b""
        self._started = False
        self._commit_statements: set[bytes] = set()

    def feed(self, data: bytes) -> bool:
        """Take the next bytes; True if they complete a message that sends a COMMIT."""
        self._buf += data
        commit = False
        while True:
            if not self._started:
                if len(self._buf) < 8:
                    return commit
                length, code = struct.unpack("!ii", self._buf[:8])
                if len(self._buf) < length:
                    return commit
                self._buf = self._buf[length:]
                self._started = code not in _PRE_STARTUP
                continue
            if len(self._buf) < 5:
                return commit
            kind = self._buf[:1]
            (length,) = struct.unpack("!i", self._buf[1:5])
            if len(self._buf) < 1 + length:
                return commit
            body, self._buf = self._buf[5 : 1 + length], self._buf[1 + length :]
            if kind == b"Q":
                commit = commit or _is_commit(body)
            elif kind == b"P":  # Parse: statement name, query text, parameter types
                name, _, rest = body.partition(b"\x00")
                query = rest.partition(b"\x00")[0]
                if _is_commit(query):  # not run yet: its Bind (maybe in a later read) runs it
                    self._commit_statements.add(name)
                else:
                    self._commit_statements.discard(name)
            elif kind == b"B":  # Bind: portal name, statement name, ...
                statement = body.split(b"\x00", 2)[1]
                commit = commit or statement in self._commit_statements
