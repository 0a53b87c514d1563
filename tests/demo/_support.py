"""What the demo tests share: the `tether demo` command line for a data directory."""

from __future__ import annotations

import sys
from pathlib import Path


def demo_argv(data: Path, *extra: str, arm: bool = False) -> list[str]:
    """`python -m tether demo --data-dir <data> <extra...>` with this interpreter; the reaches
    only (`--moves 0`) unless `arm` (then `extra` says how the operator decides)."""
    moves = () if arm else ("--moves", "0")
    return [sys.executable, "-m", "tether", "demo", "--data-dir", str(data), *moves, *extra]
