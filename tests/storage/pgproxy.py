"""A loopback TCP proxy in front of PostgreSQL that can lose one COMMIT or its reply.

`CommitCutter` forwards every byte both ways until armed; then, at the next COMMIT a client
sends (after skipping ``skip`` of them), it either drops the COMMIT and cuts the connection
(the server rolls back: the commit did not land) or forwards it and cuts the connection
instead of forwarding the server's reply (the commit landed, the client never hears). The
client sees the same broken connection either way: an unknown outcome.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


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
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str, *, skip: int = 0) -> None:
        """``drop_commit`` or ``drop_reply`` at the next COMMIT after ``skip`` of them."""
        assert mode in ("drop_commit", "drop_reply")
        with self._lock:
            self._mode, self._skip = mode, skip

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

    @staticmethod
    def _cut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._cut(server)
                return
            if b"COMMIT\x00" in data:
                with self._lock:
                    mode = self._mode
                    if mode is not None and self._skip > 0:
                        self._skip -= 1
                        mode = None
                    elif mode is not None:
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
