"""A content-addressed artifact store in the data directory for results above the inline bound.

Bytes at or under `inline_bound` travel inside the reference itself (`inline:` + base64);
larger ones are written to `artifacts/sha256/<ab>/<hex>`, fsynced (file and directories), and
only then is a `ResultRef` returned, so a reference never outlives its payload.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import uuid
from pathlib import Path
from typing import Final

from tether.activities import ResultRef
from tether.runtime._errors import ArtifactCorrupt, ArtifactError, ArtifactMissing

#: Default largest payload carried inline in the catalog record (bytes).
DEFAULT_INLINE_BOUND: Final = 256

_INLINE: Final = "inline:"
_STORED: Final = "artifact:sha256/"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ArtifactStore:
    """Content-addressed, write-once payload storage. Shareable across threads and processes."""

    def __init__(self, root: str | Path, *, inline_bound: int = DEFAULT_INLINE_BOUND) -> None:
        if inline_bound < 0:
            raise ArtifactError("inline_bound must be >= 0")
        self.root = Path(root)
        self.inline_bound = inline_bound
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        (self.root / "sha256").mkdir(parents=True, exist_ok=True)

    def _path(self, hexdigest: str) -> Path:
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    def put_bytes(self, data: bytes, media_type: str) -> ResultRef:
        """Make `data` durable and return its bounded reference (`sha256:` digest + ref)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArtifactError(f"artifact data must be bytes, not {type(data).__name__}")
        if not isinstance(media_type, str) or not media_type:
            raise ArtifactError("artifact media_type must be a non-empty string")
        data = bytes(data)
        hexdigest = hashlib.sha256(data).hexdigest()
        digest = "sha256:" + hexdigest
        if len(data) <= self.inline_bound:
            ref = _INLINE + base64.b64encode(data).decode("ascii")
            return ResultRef(ref=ref, digest=digest, media_type=media_type, size=len(data))
        final = self._path(hexdigest)
        if not (final.exists() and self._matches(final, hexdigest, len(data))):
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.root / "tmp" / f"{hexdigest}.{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            _fsync_dir(final.parent)
            _fsync_dir(final.parent.parent)
        return ResultRef(
            ref=_STORED + hexdigest, digest=digest, media_type=media_type, size=len(data)
        )

    @staticmethod
    def _matches(path: Path, hexdigest: str, size: int) -> bool:
        data = path.read_bytes()
        return len(data) == size and hashlib.sha256(data).hexdigest() == hexdigest

    def get_bytes(self, ref: str, digest: str) -> bytes:
        """The payload named by `ref`, checked against `digest`.

        Raises:
            ArtifactMissing: nothing is stored under `ref`.
            ArtifactCorrupt: the bytes do not hash to `digest`, or `ref` is malformed.
        """
        if ref.startswith(_INLINE):
            try:
                data = base64.b64decode(ref[len(_INLINE) :], validate=True)
            except (binascii.Error, ValueError) as e:
                raise ArtifactCorrupt(f"inline reference is not base64: {e}") from e
        elif ref.startswith(_STORED):
            hexdigest = ref[len(_STORED) :]
            if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
                raise ArtifactCorrupt(f"malformed artifact reference {ref!r}")
            try:
                data = self._path(hexdigest).read_bytes()
            except FileNotFoundError as e:
                raise ArtifactMissing(f"no artifact stored under {ref!r}") from e
        else:
            raise ArtifactCorrupt(f"unknown reference scheme in {ref!r}")
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ArtifactCorrupt(f"artifact {ref[:80]!r} hashes to {actual}, not {digest}")
        return data

    def get(self, result: ResultRef) -> bytes:
        """The payload of `result`, checked against its digest and size."""
        data = self.get_bytes(result.ref, result.digest)
        if len(data) != result.size:
            raise ArtifactCorrupt(f"artifact is {len(data)} bytes, reference says {result.size}")
        return data

    def is_durable(self, result: ResultRef) -> bool:
        """Whether `result`'s payload is stored (or inline) and matches its digest."""
        try:
            self.get(result)
        except ArtifactError:
            return False
        return True
