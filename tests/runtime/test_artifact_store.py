"""The content-addressed artifact store: inline bound, fsynced files, digest-checked reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tether.runtime import ArtifactCorrupt, ArtifactError, ArtifactMissing, ArtifactStore


def test_small_payloads_travel_inline_and_large_ones_by_reference(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", inline_bound=16)
    small = store.put_bytes(b"tiny", "text/plain")
    assert small.ref.startswith("inline:") and small.size == 4
    assert small.digest == "sha256:" + hashlib.sha256(b"tiny").hexdigest()
    big = b"x" * 1000
    ref = store.put_bytes(big, "application/octet-stream")
    hexdigest = hashlib.sha256(big).hexdigest()
    assert ref.ref == f"artifact:sha256/{hexdigest}" and ref.digest == f"sha256:{hexdigest}"
    assert len(ref.ref) < 100  # bounded, whatever the payload size
    assert (tmp_path / "artifacts" / "sha256" / hexdigest[:2] / hexdigest).read_bytes() == big
    assert store.get(ref) == big and store.get(small) == b"tiny"
    assert store.put_bytes(big, "application/octet-stream") == ref  # idempotent, same ref
    assert list((tmp_path / "artifacts" / "tmp").iterdir()) == []


def test_reads_fail_closed_on_missing_corrupt_or_malformed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, inline_bound=0)
    ref = store.put_bytes(b"payload", "text/plain")
    path = tmp_path / "sha256" / ref.digest[7:9] / ref.digest[7:]
    path.write_bytes(b"tampered")
    with pytest.raises(ArtifactCorrupt):
        store.get(ref)
    assert not store.is_durable(ref)
    path.unlink()
    with pytest.raises(ArtifactMissing):
        store.get(ref)
    # Rewriting the same content repairs the store.
    assert store.put_bytes(b"payload", "text/plain") == ref and store.get(ref) == b"payload"
    for bad in ("inline:!!!", "artifact:sha256/zz", "http://x", "artifact:sha256/" + "0" * 64):
        with pytest.raises(ArtifactError):
            store.get_bytes(bad, ref.digest)
    with pytest.raises(ArtifactCorrupt):
        store.get_bytes("inline:aGVsbG8=", ref.digest)  # "hello" under the wrong digest


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    with pytest.raises(ArtifactError):
        store.put_bytes("text", "text/plain")  # type: ignore[arg-type]
    with pytest.raises(ArtifactError):
        store.put_bytes(b"x", "")
    with pytest.raises(ArtifactError):
        ArtifactStore(tmp_path, inline_bound=-1)


_WRITER = """
import sys
from tether.runtime import ArtifactStore
ArtifactStore(sys.argv[1], inline_bound=0).put_bytes(b"y" * 5000, "application/octet-stream")
"""


def test_a_writer_killed_mid_write_leaves_a_temp_file_the_next_open_removes(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env["TETHER_CRASH_AT"] = "artifact_temp_written"
    root = tmp_path / "artifacts"
    proc = subprocess.run(
        [sys.executable, "-c", _WRITER, str(root)], env=env, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL
    [left] = list((root / "tmp").iterdir())  # written and fsynced, never renamed
    assert left.stat().st_size == 5000
    assert [p for p in (root / "sha256").rglob("*") if p.is_file()] == []
    # A live writer's temp file (this process) and a young unowned one must survive.
    live = root / "tmp" / f"{'a' * 64}.{os.getpid()}.nonce"
    live.write_bytes(b"in flight")
    young = root / "tmp" / "legacy-young"
    young.write_bytes(b"?")
    old = root / "tmp" / "legacy-old"
    old.write_bytes(b"?")
    an_hour_ago = time.time() - 2 * 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    store = ArtifactStore(root, inline_bound=0)
    assert store.removed_temps == 2
    assert sorted(p.name for p in (root / "tmp").iterdir()) == sorted([live.name, young.name])
    ref = store.put_bytes(b"y" * 5000, "application/octet-stream")  # the write can be redone
    assert store.get(ref) == b"y" * 5000


_LIMITED = """
import resource, signal, sys
from tether.runtime import ArtifactStore
store = ArtifactStore(sys.argv[1], inline_bound=0)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    store.put_bytes(b"z" * 100_000, "application/octet-stream")
except OSError as e:
    print(e.errno)
"""


def test_a_write_the_disk_refuses_leaves_no_temp_file(tmp_path: Path) -> None:
    """A payload the disk refused part way (full, a file-size limit) left its temp file, which
    kept the disk full until a restart removed it: freeing space and running the same command
    again was not enough."""
    import errno
    import subprocess
    import sys

    root = tmp_path / "artifacts"
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(root)], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == str(errno.EFBIG), proc.stdout + proc.stderr
    assert list((root / "tmp").iterdir()) == []
    assert [p for p in (root / "sha256").rglob("*") if p.is_file()] == []
