"""Test helpers for network listeners: a self-signed certificate made with `openssl`, and a
real non-loopback address of this machine to bind."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Cert:
    """A self-signed certificate (also the client's trust anchor) and its 0600 key."""

    cert: Path
    key: Path


def make_cert(directory: Path, *, ips: tuple[str, ...] = ("127.0.0.1",)) -> Cert:
    """A P-256 self-signed certificate for ``localhost`` and `ips`, valid for a day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no `openssl` on PATH to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "host.pem", directory / "host.key"
    names = ",".join(["DNS:localhost", *(f"IP:{ip}" for ip in ips)])
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=localhost", "-addext", f"subjectAltName={names}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return Cert(cert, key)


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (None when it has none)."""
    candidates: list[str] = []
    try:
        # A UDP "connection" sends nothing: it only picks the address a route would use.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            candidates.append(probe.getsockname()[0])
    except OSError:
        pass
    ip = shutil.which("ip")
    if ip is not None:
        shown = subprocess.run([ip, "-4", "-o", "addr", "show"], capture_output=True, text=True)
        for line in shown.stdout.splitlines():
            parts = line.split()
            if "inet" in parts:
                candidates.append(parts[parts.index("inet") + 1].split("/")[0])
    for address in candidates:
        if ipaddress.ip_address(address).is_loopback or address == "0.0.0.0":
            continue
        try:  # it must be bindable here
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((address, 0))
        except OSError:
            continue
        return address
    return None


def require_non_loopback_address() -> str:
    address = non_loopback_address()
    if address is None:
        pytest.skip(
            "this machine has no bindable non-loopback IPv4 address (no route and no address "
            "in `ip -4 addr`), so a listener off loopback cannot be exercised here"
        )
    return address
