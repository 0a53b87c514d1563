"""A stand-alone worker process for the provider's crash tests.

Usage: `python _worker.py <root> <operation-id> <attempt> <steps>`. It runs one operation
through `SimProvider.execute` and prints JSON lines: `child` (the episode child's identity),
`progress`, and finally `done` with the result digest. Tests SIGKILL it at chosen moments.
"""

from __future__ import annotations

import json
import sys

from tether.families.sim import EpisodeRequest, SimProvider


def main() -> int:
    root, operation_id, attempt, steps = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    request = EpisodeRequest.create((0.22, 0.12), seed=11, episodes=1, steps=steps)

    def out(event: dict[str, object]) -> None:
        print(json.dumps(event), flush=True)

    outcome = SimProvider(root).execute(
        operation_id,
        attempt,
        request,
        progress=lambda done, total, err: out({"event": "progress", "done": done}),
        on_start=lambda child: out({"event": "child", **child.to_dict()}),
    )
    out({"event": "done", "digest": outcome.digest, "reused": outcome.reused})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
