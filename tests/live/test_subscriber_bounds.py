"""A frame whose seq is far ahead (any valid seq, up to 2^53 - 1, from any peer) is a gap with
a bounded report: it made the subscriber list every seq between, and the allocation aborted
the process (SIGABRT, no exception to catch)."""

from __future__ import annotations

import subprocess
import sys

_FAR = """
from tether.live import LiveSubscriber
sub = LiveSubscriber(epoch=1, seq=0)
out = sub.handle_frame(b'{"epoch":1,"seq":9007199254740991,"deliveries":[]}')
print(out.fault, out.reread, len(out.missing))
"""


def test_a_seq_far_ahead_is_a_bounded_gap_not_an_abort() -> None:
    done = subprocess.run([sys.executable, "-c", _FAR], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    fault, reread, missing = done.stdout.split()
    assert (fault, reread) == ("gap", "True")
    assert 0 < int(missing) <= 1024, missing  # the subscriber's window (its default)
