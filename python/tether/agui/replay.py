"""`tether replay` (and, until the simulation lands, `tether demo`): feed a recorded AG-UI
stream through the activity store and print the resulting activity messages."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from tether import _exit
from tether._args import Parser, debug, error_fields, json_text, refuse
from tether.agui._store import ActivityStore
from tether.errors import AguiError

__all__ = ["DEFAULT_STREAM", "main", "replay"]

# The recorded example capture, shipped as package data (written by
# examples/record_activity_stream.py), so `tether replay` works from an installed wheel.
DEFAULT_STREAM: Traversable = resources.files("tether.agui") / "activity_stream.sse"


def replay(data: bytes, *, chunk_size: int = 4096, partial: bool = False) -> ActivityStore:
    """Feeds `data` to a fresh store in `chunk_size` pieces, as a network read would.

    The run lifecycle is enforced; with `partial` the capture may begin mid-run (before its
    first RUN_STARTED or RUN_ERROR, events count as inside a run whose ids are unknown).
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    store = ActivityStore(lifecycle="partial" if partial else "strict")
    for i in range(0, len(data), chunk_size):
        store.feed(data[i : i + chunk_size])
    store.finish()
    return store


def _describe(message: dict[str, Any]) -> str:
    """A message as a header line and one compact JSON line per content member."""
    owner = f" (subagent {message['subagentRunId']})" if "subagentRunId" in message else ""
    kind = message.get("activityType", message["role"])
    lines = [f"{message['role']} {message['id']} [{kind}]{owner}"]
    content = message.get("content")
    if isinstance(content, dict):
        lines += [f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in content.items()]
    elif content is not None:
        lines.append(f"  content: {json.dumps(content, ensure_ascii=False)}")
    if "metadata" in message:
        lines.append(f"  metadata: {json.dumps(message['metadata'], ensure_ascii=False)}")
    return "\n".join(lines)


#: The codes `tether replay` documents (a test checks them against `tether._exit`).
EXIT_CODES = (_exit.OK, _exit.FAILED, _exit.USAGE)


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="tether replay",
        description="Replay a recorded AG-UI stream (SSE, NDJSON or one JSON event) through "
        "Tether's activity store and print the activity messages it ends with.",
        epilog="exit codes: 0 replayed; 1 a fatal stream error; 2 usage or a file that cannot be "
        "read (see `tether --help`).",
    )
    p.add_argument(
        "file",
        nargs="?",
        type=Path,
        default=DEFAULT_STREAM,
        help="the recorded stream (default: the example capture shipped with tether, "
        "tether/agui/activity_stream.sse)",
    )
    p.add_argument("--chunk-size", type=int, default=4096, help="bytes per feed")
    p.add_argument(
        "--all", action="store_true", help="print every message, not only activity messages"
    )
    p.add_argument("--json", action="store_true", help="print one JSON array instead of text")
    p.add_argument(
        "--partial",
        action="store_true",
        help="the capture may begin mid-run (no RUN_STARTED first); default: the whole run "
        "lifecycle is enforced from the first event",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the replay; exit status 0 on success, 1 on a fatal stream error, 2 on bad usage."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.chunk_size <= 0:
        refuse("tether replay", "usage", "--chunk-size must be positive", error="UsageError")
        return _exit.USAGE
    try:
        data = args.file.read_bytes()
    except OSError as e:
        hint = (
            "; the example capture ships inside the tether package "
            "(tether/agui/activity_stream.sse) and is missing from this install: reinstall "
            "tether, or pass a stream file: tether replay FILE"
            if args.file == DEFAULT_STREAM
            else ""
        )
        refuse(
            "tether replay",
            "unreadable",
            f"cannot read {args.file}: {e.strerror or e}{hint}",
            error=type(e).__name__,
        )
        return _exit.USAGE
    try:
        store = replay(data, chunk_size=args.chunk_size, partial=args.partial)
    except AguiError as e:
        if debug():  # `tether --debug` / TETHER_DEBUG=1: the traceback too
            traceback.print_exc()
        hint = (
            "; a capture that begins mid-run replays with --partial"
            if e.code == "run_not_started"
            else ""
        )
        first = str(e).splitlines()[0] if str(e) else ""
        code, message, details = error_fields(e)
        refuse(
            "tether replay",
            code,
            f"{args.file}: {message}{hint}",
            error=type(e).__name__,
            details=details,
            line=f"{args.file}: {type(e).__name__}: {first}{hint}",
        )
        return _exit.FAILED
    if store.events_handled == 0:
        # Nothing in it reads as an event (a text file, binary, an empty capture): saying
        # "replayed 0 events" would pass a wrong file for an empty run.
        line = f"{args.file}: no AG-UI event in it (an SSE, NDJSON or JSON capture of a stream)"
        refuse("tether replay", "no_events", line, error="AguiError", line=f"no_events: {line}")
        return _exit.FAILED
    for w in store.warnings:
        print(
            f"warning: {w.code} {w.event_type} {w.message_id or '-'}: {w.reason}", file=sys.stderr
        )
    try:
        _print(store, args.file.name, all_messages=args.all, as_json=args.json)
    except BrokenPipeError:
        # The reader went away (`tether demo | head`): not a failure of the replay.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return _exit.OK


def _print(store: ActivityStore, name: str, *, all_messages: bool, as_json: bool) -> None:
    messages = store.messages() if all_messages else store.activities()
    if as_json:
        # Strict JSON: a number past a double (1e999, read as an infinity, as Python's and a
        # browser's parsers read it) is written as its text, never as `Infinity`.
        print(json_text(messages, indent=2, ensure_ascii=False))
        return
    print(
        f"replayed {store.events_handled} events from {name}: "
        f"{len(store)} messages, {len(store.activities())} activities, "
        f"{len(store.warnings)} warnings"
    )
    for m in messages:
        print()
        print(_describe(m))


if __name__ == "__main__":
    raise SystemExit(main())
