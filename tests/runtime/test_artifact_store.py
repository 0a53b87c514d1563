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
