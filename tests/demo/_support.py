"""What the demo tests share: the `tether demo` command line for a data directory."""

from __future__ import annotations

import sys
from pathlib import Path


def demo_argv(data: Path, *extra: str) -> list[str]:
    """`python -m tether demo --data-dir <data> <extra...>` with this interpreter."""
    return [sys.executable, "-m", "tether", "demo", "--data-dir", str(data), *extra]
