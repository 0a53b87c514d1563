"""A loopback TCP proxy that can go silent or away: `freeze()` keeps every connection open and
delivers nothing more either way, as a cut link does (a host powered off, a NAT that dropped
the flow): no reset, no FIN, only silence. `down()` resets every open connection and closes
each new one at once, as a server that went away, until `up()`. `reset_clients()` resets only
the clients' side, the server's left open and silent."""

from __future__ import annotations

import socket
import struct
import threading

from tether.testing._ports import cut


class FreezeProxy:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host.strip("[]"), int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.frozen = threading.Event()
        self._down = threading.Event()
        self._socks: list[socket.socket] = []  # client, server, client, server, ...
        self._kept: list[socket.socket] = []  # server sides `reset_clients` left open
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.frozen.set()

    def down(self) -> None:
        self._down.set()
        socks, self._socks = self._socks, []
        cut(*socks)

    def up(self) -> None:
        self._down.clear()

    def reset_clients(self) -> None:
        """Reset the client side of every open connection and keep the server side open,
        saying nothing: what a NAT or a firewall that lost its state does. The server holds
        such a session (and its locks) until its keepalive gives it up."""
        socks, self._socks = self._socks, []
        for client in socks[0::2]:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # a reset, no FIN
        self._kept += socks[1::2]

    def close(self) -> None:
        self._listener.close()
        self.down()
        cut(*self._kept)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                client.close()
                continue
            server = socket.create_connection(self._target)
            self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.frozen.is_set():
                continue  # read and dropped: the peer hears nothing, and nothing closes
            try:
                dst.sendall(data)
            except OSError:
                return
