"""One unary gRPC call over a bare HTTP/2 connection, with header bytes grpcio's own client
refuses to send (a value that is not UTF-8): what a proxy or another language's client can
send. Only what the call needs: the preface, an empty SETTINGS, one HEADERS frame of literal
fields (HPACK, never indexed, no Huffman coding), one DATA frame; then everything the server
sends until it closes or a short quiet."""

from __future__ import annotations

import socket
import struct

_HEADERS, _DATA, _SETTINGS = 1, 0, 4
_END_STREAM, _END_HEADERS = 0x1, 0x4


def _length(n: int) -> bytes:
    """An HPACK string length, 7-bit prefix, no Huffman flag."""
    if n < 0x7F:
        return bytes([n])
    out, n = bytearray([0x7F]), n - 0x7F
    while n >= 0x80:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(name: bytes, value: bytes) -> bytes:
    """A literal header field never indexed, with a literal name."""
    return b"\x10" + _length(len(name)) + name + _length(len(value)) + value


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def unary(address: str, path: str, message: bytes, metadata: list[tuple[bytes, bytes]]) -> bytes:
    """The raw bytes the server answered a call of ``path`` with ``message`` (serialized)."""
    host, _, port = address.rpartition(":")
    block = b"".join(
        _field(k, v)
        for k, v in [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", address.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            *metadata,
        ]
    )
    body = b"\x00" + struct.pack(">I", len(message)) + message
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + _frame(_SETTINGS, 0, 0, b"")
            + _frame(_HEADERS, _END_HEADERS, 1, block)
            + _frame(_DATA, _END_STREAM, 1, body)
        )
        sock.settimeout(1.0)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            pass
    return got
