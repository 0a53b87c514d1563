"""A loopback port for a server a test starts later, chosen where nothing else takes it first;
and cutting a test proxy's connections."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (32768 when unreadable)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, below the kernel's ephemeral range.

    A port from ``bind(0)`` lies inside that range: once the probe socket closes, any outgoing
    connection on the machine may be given it as a source port (a client retrying towards it
    can even connect to itself), and the server that was meant to bind it then cannot. Below
    the range only another listener can take it.
    """
    low = _ephemeral_low()
    start = max(1024, low - 16384)
    rng = random.SystemRandom()
    for _ in range(256):
        port = rng.randrange(start, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free loopback port in {start}..{low - 1}")


def cut(*socks: socket.socket) -> None:
    """End each connection at once, both ways (a peer reading sees it closed), then close it."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
