"""A content-addressed artifact store in the data directory for results above the inline bound.

Bytes at or under `inline_bound` travel inside the reference itself (`inline:` + base64);
larger ones are written to `artifacts/tmp/`, fsynced, renamed to `artifacts/sha256/<ab>/<hex>`
and the directories fsynced; only then is a `ResultRef` returned, so a reference never
outlives its payload. A process killed mid-write leaves only a temp file, named after its pid:
opening the store removes temp files whose writer is gone (never a live writer's).

With a `shared` store (`tether.storage._pg_artifacts.PgArtifacts`: the artifacts table of a
PostgreSQL catalog that several hosts share), payloads above the inline bound are written there
instead, under the same `artifact:sha256/<hex>` reference, so every host reads them: a worker
the input another host admitted, the settling host the result another host recorded. A read
looks in the data dir first (payloads written before the catalog was shared), then there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Final, Protocol

from tether._core import TetherError
from tether.activities import ResultRef
from tether.runtime._crash import crash_point
from tether.runtime._errors import ArtifactCorrupt, ArtifactError, ArtifactMissing

#: Default largest payload carried inline in the catalog record (bytes).
DEFAULT_INLINE_BOUND: Final = 256
#: The largest `inline_bound`: an inline reference (`inline:` + base64) of that many bytes is
#: the catalog's bound on a reference (4096 bytes); one of more would be refused at admission
#: or at a result's record, after the tick or the effect it belongs to.
MAX_INLINE_BOUND: Final = 3066

_INLINE: Final = "inline:"
_STORED: Final = "artifact:sha256/"


#: A temp file whose name names no writer pid is removed once it is at least this old (s).
UNOWNED_TEMP_AGE_S: Final = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _fsync_dir(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return 1


class SharedArtifacts(Protocol):
    """Where hosts that share a catalog keep payloads (see the module docstring)."""

    conninfo: str

    def put(self, hexdigest: str, data: bytes) -> None:
        """Store `data` under its SHA-256 `hexdigest`, durably (a no-op when it is there)."""
        ...

    def get(self, hexdigest: str) -> bytes | None:
        """The bytes stored under `hexdigest`, or None."""
        ...

    def close(self) -> None: ...


def shared_for(catalog_url: str | None) -> SharedArtifacts | None:
    """The shared artifact store of a catalog URL: its table on a PostgreSQL catalog, none for
    a SQLite one (one host's)."""
    from tether.storage._urls import postgres_url

    url = postgres_url(catalog_url)
    if url is None:
        return None
    from tether.storage._pg_artifacts import PgArtifacts

    return PgArtifacts(url)


class ArtifactStore:
    """Content-addressed, write-once payload storage. Shareable across threads and processes."""

    def __init__(
        self,
        root: str | Path,
        *,
        inline_bound: int = DEFAULT_INLINE_BOUND,
        shared: SharedArtifacts | None = None,
    ) -> None:
        if (
            isinstance(inline_bound, bool)
            or not isinstance(inline_bound, int)
            or not 0 <= inline_bound <= MAX_INLINE_BOUND
        ):
            raise ArtifactError(
                f"inline_bound must be an int in 0..{MAX_INLINE_BOUND} (an inline reference"
                f" stays within the catalog's 4096 bytes), not {inline_bound!r}"
            )
        self.root = Path(root)
        self.inline_bound = inline_bound
        #: The hosts' shared store (a PostgreSQL catalog's table), or None: the data dir only.
        self.shared = shared
        #: fsyncs this store issued (payloads and directories; inline results issue none).
        self.fsyncs = 0
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        (self.root / "sha256").mkdir(parents=True, exist_ok=True)
        self.removed_temps = self.clean_stale_temps()

    def clean_stale_temps(self) -> int:
        """Remove temp files left by writers that died mid-write; return how many.

        Temp names are `<hex>.<pid>.<nonce>`: a file is removed only when that pid is no longer
        running (a reused pid keeps it, which is the safe side), or, for a name without a pid,
        when it is older than `UNOWNED_TEMP_AGE_S`. No reference ever names a temp file.
        """
        removed = 0
        now = time.time()
        for path in (self.root / "tmp").iterdir():
            parts = path.name.split(".")
            try:
                if len(parts) == 3 and parts[1].isdigit():
                    stale = int(parts[1]) != os.getpid() and not _pid_alive(int(parts[1]))
                else:
                    stale = now - path.stat().st_mtime >= UNOWNED_TEMP_AGE_S
                if stale:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:  # another process cleaned it first
                continue
        return removed

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
        if self.shared is not None:
            try:
                self.shared.put(hexdigest, data)
            except TetherError as exc:
                raise ArtifactError(f"cannot store artifact sha256:{hexdigest}: {exc}") from None
            return ResultRef(
                ref=_STORED + hexdigest, digest=digest, media_type=media_type, size=len(data)
            )
        final = self._path(hexdigest)
        if final.exists() and self._matches(final, hexdigest, len(data)):
            # Another writer renamed it in; its directory entry may not be durable yet if that
            # writer died before its directory fsync, so make it durable before referencing.
            self.fsyncs += _fsync_dir(final.parent) + _fsync_dir(final.parent.parent)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.root / "tmp" / f"{hexdigest}.{os.getpid()}.{uuid.uuid4().hex}"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                crash_point("artifact_temp_written")
                os.replace(tmp, final)
            except BaseException:
                # A write the disk refused (full, a size limit, an I/O error): the part written
                # goes, or it would keep the disk full until a restart cleaned it, and freeing
                # space and running the same command again would not be enough.
                tmp.unlink(missing_ok=True)
                raise
            self.fsyncs += 1 + _fsync_dir(final.parent) + _fsync_dir(final.parent.parent)
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
                found = self._shared_get(hexdigest)
                if found is None:
                    raise ArtifactMissing(f"no artifact stored under {ref!r}") from e
                data = found
        else:
            raise ArtifactCorrupt(f"unknown reference scheme in {ref!r}")
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ArtifactCorrupt(f"artifact {ref[:80]!r} hashes to {actual}, not {digest}")
        return data

    def _shared_get(self, hexdigest: str) -> bytes | None:
        if self.shared is None:
            return None
        try:
            return self.shared.get(hexdigest)
        except TetherError as exc:
            raise ArtifactError(f"cannot read artifact sha256:{hexdigest}: {exc}") from None

    def close(self) -> None:
        """Close the shared store's connection (the files need nothing)."""
        if self.shared is not None:
            self.shared.close()

    def get(self, result: ResultRef) -> bytes:
        """The payload of `result`, checked against its digest and size."""
        data = self.get_bytes(result.ref, result.digest)
        if len(data) != result.size:
            raise ArtifactCorrupt(f"artifact is {len(data)} bytes, reference says {result.size}")
        return data

    def holds(self, data: bytes) -> bool:
        """Whether ``data`` is stored (not inline: one above the inline bound), by its
        digest, checked against its bytes; nothing is written."""
        hexdigest = hashlib.sha256(data).hexdigest()
        ref = ResultRef(
            _STORED + hexdigest, "sha256:" + hexdigest, "application/octet-stream", len(data)
        )
        return len(data) > self.inline_bound and self.is_durable(ref)

    def is_durable(self, result: ResultRef) -> bool:
        """Whether `result`'s payload is stored (or inline) and matches its digest."""
        try:
            self.get(result)
        except ArtifactError:
            return False
        return True
