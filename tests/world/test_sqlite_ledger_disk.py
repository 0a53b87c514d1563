"""The SQLite world ledger on a disk that refuses writes (a real RLIMIT_FSIZE, in a process
of its own): a typed `WorldStorageError` naming the failure, nothing of the transaction
written, and the ledger usable as it was once writes are possible again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, os, resource, sys
from pathlib import Path
from tether.world import ComponentWrite, SqliteLedger, WorldStorageError
path = Path(sys.argv[1])
ledger = SqliteLedger.open(path)
ledger.create_world("w")
writer = ledger.acquire_writer("w")
head = ledger.head("w")
size = sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 64 * 1024, hard))
out = {"refused": None}
for n in range(200):
    try:
        head = ledger.commit(writer, head, [ComponentWrite(f"e{n}", "c", {"x": "y" * 4000})])
        ledger.complete_post_commit(head)
    except WorldStorageError as exc:
        out["refused"] = {"code": exc.code, "message": exc.message, "tick": head.tick}
        break
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
out["head_after_refusal"] = ledger.head("w").tick
head = ledger.commit(writer, ledger.head("w"), [ComponentWrite("after", "c", {"x": 1})])
out["committed_after"] = head.tick
ledger.close()
print(json.dumps(out))
"""


def test_a_refused_write_is_a_typed_error_and_the_ledger_goes_on(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "world.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    refused = out["refused"]
    assert refused is not None, out
    assert refused["code"] in ("file_too_large", "storage_io_error", "disk_full"), refused
    assert "nothing of the transaction was written" in refused["message"]
    # The refused tick was not written: the head is the last one that committed, and the
    # next commit lands on it.
    assert out["head_after_refusal"] == refused["tick"]
    assert out["committed_after"] == refused["tick"] + 1
