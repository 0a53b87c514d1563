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
    """A P-256 self-signed certificate for ``localhost`` and `ips`, valid for a year."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no `openssl` on PATH to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "host.pem", directory / "host.key"
    names = ",".join(["DNS:localhost", *(f"IP:{ip}" for ip in ips)])
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "365",
         "-subj", "/CN=localhost", "-addext", f"subjectAltName={names}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return Cert(cert, key)


def make_dated_cert(directory: Path, start: str, end: str) -> Cert:
    """A P-256 self-signed certificate for ``localhost`` and 127.0.0.1 valid from ``start`` to
    ``end`` (``YYYYMMDDHHMMSSZ``, either may be in the past or the future): `openssl ca
    -selfsign`, the one openssl 3.0 command that takes both dates."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no `openssl` on PATH to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key, csr = directory / "host.pem", directory / "host.key", directory / "host.csr"
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("01\n")
    (directory / "ca.cnf").write_text(
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n"
        "serial = serial\ndefault_md = sha256\npolicy = p\ncopy_extensions = copy\n"
        "[p]\ncommonName = supplied\n"
    )
    subprocess.run(
        [openssl, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [openssl, "ca", "-batch", "-selfsign", "-config", "ca.cnf", "-keyfile", str(key),
         "-in", str(csr), "-out", str(cert), "-startdate", start, "-enddate", end, "-notext"],
        check=True, capture_output=True, cwd=directory,
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


@dataclass(frozen=True)
class Authority:
    """A test certificate authority (made with `openssl`) that issues leaf certificates."""

    cert: Path
    key: Path
    directory: Path

    def issue(self, name: str, *, server: bool, ips: tuple[str, ...] = ("127.0.0.1",)) -> Cert:
        """A P-256 leaf for `name` signed by this CA: a server's (``localhost`` and `ips`) or a
        client's (clientAuth), valid for a year; its key 0600."""
        openssl = shutil.which("openssl")
        assert openssl is not None
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        csr, ext = self.directory / f"{name}.csr", self.directory / f"{name}.ext"
        if server:
            names = ",".join(["DNS:localhost", *(f"IP:{ip}" for ip in ips)])
            ext.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
        else:
            ext.write_text(f"subjectAltName=DNS:{name}\nextendedKeyUsage=clientAuth\n")
        subprocess.run(
            [openssl, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [openssl, "x509", "-req", "-in", str(csr), "-CA", str(self.cert),
             "-CAkey", str(self.key), "-CAcreateserial", "-out", str(cert), "-days", "365",
             "-extfile", str(ext)],
            check=True, capture_output=True,
        )  # fmt: skip
        key.chmod(0o600)
        return Cert(cert, key)


def make_authority(directory: Path, name: str = "test-ca") -> Authority:
    """A self-signed P-256 CA certificate (CA:TRUE), valid for a year."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no `openssl` on PATH to make a test certificate authority")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "365", "-subj", f"/CN={name}",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        check=True, capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return Authority(cert, key, directory)
