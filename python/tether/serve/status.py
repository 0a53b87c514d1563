"""`tether status --config host.toml [--json]`: what the running daemon owns and does.

Each device with its identity, owner pid, latch and a fresh read-back (radians, rad/s, decoded
hardware errors), the Activities by state, and the parked decisions with their age. It asks
the daemon only: with no `tether serve` running it says so in one line and exits 7 (the
catalog alone cannot say who owns a device or what it reads now)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tether import _exit
from tether._args import Parser, duration, error_fields, error_line
from tether.client import Client, ClientError
from tether.devices.config import load_config, state_dir_of_file
from tether.devices.latch import STOP_CAUSES
from tether.errors import HostConfigError, TetherError
from tether.serve.config import load_serve

#: How long `tether status` waits for the daemon's answer by default (`--timeout`): its
#: answer is a fresh read-back of each device and the catalog's counts, milliseconds each; a
#: daemon that takes longer is stopped, or its storage or a bus is stalled, and says so.
STATUS_TIMEOUT_S = 10.0

#: The codes `tether status` documents (a test checks them against `tether._exit`).
EXIT_CODES = (_exit.OK, _exit.USAGE, _exit.UNAVAILABLE)
_EPILOG = (
    "exit codes: 0 the daemon answered; 2 usage or configuration; 7 no `tether serve` runs "
    "for the state dir, or it did not answer (see `tether --help`)."
)


def _age(ms: object) -> str:
    return duration(ms)


def _joint(name: str, j: dict[str, Any]) -> str:
    errors = ", ".join(j.get("hardware_errors") or []) or "none"
    return (
        f"    {name}: at {j.get('position_rad', 0.0):+.4f} rad, goal "
        f"{j.get('goal_rad', 0.0):+.4f} rad, {'moving' if j.get('moving') else 'still'}, "
        f"torque {'on' if j.get('torque_on') else 'off'}, hardware errors {errors}"
    )


def listener_words(record: dict[str, Any]) -> str:
    """Every listener of a daemon's record (its ready line, `tether status`), or "off"."""
    live = record["live"] + "/<world>" if record.get("live") else "off"
    return (
        f"AG-UI stream {record.get('sse') or 'off'}, live events {live}, "
        f"gRPC {record.get('grpc') or 'off'}, console {record.get('console') or 'off'}"
    )


def store_words(record: dict[str, Any]) -> str:
    """Where a daemon's catalog and world ledger are (its ready line, `tether status`)."""
    return f"catalog {record.get('catalog') or '-'}, world {record.get('world') or '-'}"


def render(doc: dict[str, Any]) -> str:
    """The status for a person (SI units, decoded errors)."""
    daemon = doc.get("daemon") or {}
    lines = [
        f"tether serve pid {daemon.get('pid')}: data dir {daemon.get('data_dir')}, "
        + f"{store_words(daemon)}; {listener_words(daemon)}"
    ]
    for dev in doc.get("devices") or []:
        latched = ""
        if dev.get("latched"):
            cause = STOP_CAUSES.get(str(dev.get("stop_reason")))  # an operator's: none said
            why = f"{cause}; " if cause else ""
            latched = f", LATCHED ({why}tether operator resume)"
        if not dev.get("available"):
            lines.append(f"{dev['robot']}: unavailable{latched}: {dev.get('error')}")
            continue
        ident = dev.get("identity") or {}
        servos = ", ".join(
            f"id {s.get('id')} model {s.get('model')}" for s in ident.get("servos") or []
        )
        lines.append(
            f"{dev['robot']}: owned by pid {dev.get('owner_pid')} on "
            f"{ident.get('port_key') or '-'} ({servos}), safe_stop {dev.get('safe_stop')}"
            f"{latched}"
        )
        back = dev.get("read_back") or {}
        if dev.get("error"):
            lines.append(f"    read-back failed: {dev['error']}")
        for name, j in (back.get("joints") or {}).items():
            lines.append(_joint(name, j))
    for adapter in doc.get("adapters") or []:
        lines.append(f"{adapter.get('family')}: {adapter.get('summary')}")
    if doc.get("stores_error"):
        lines.append(
            f"activities and decisions unknown: the stores cannot be read now"
            f" ({doc['stores_error']})"
        )
        return "\n".join(lines)
    lines.append(_counts_line(doc.get("activities") or {}))
    parked = doc.get("parked") or []
    if not parked:
        lines.append("nothing awaits a decision")
    for item in parked:
        lines.append(
            f"parked: {item['key']}  revision {item['revision']}  {item.get('reason') or '-'}  "
            f"evidence {_age(item.get('evidence_age_ms'))} old"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = Parser(prog="tether status", description=__doc__.splitlines()[0], epilog=_EPILOG)
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument("--json", action="store_true", help="one JSON document (default: words)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=STATUS_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the daemon's answer (default: {STATUS_TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    if not 0 < args.timeout <= 3600:  # NaN too
        parser.error(f"--timeout must be more than 0 and at most 3600 s, not {args.timeout}")
    try:
        try:
            config: Any = load_config(args.config)
            # The whole file as the daemon reads it: a misspelled [serve] key is refused here.
            load_serve(args.config, state_dir=config.state_dir, robots=len(config.robots))
            state_dir = config.state_dir
        except HostConfigError as refused:
            # A mistake in the file (one being edited, say) hides no running daemon: the
            # status of the one its [host] names is shown, after the mistake is said.
            found = state_dir_of_file(Path(args.config))
            if found is None or Client(found).running() is None:
                raise
            code, message, _ = error_fields(refused)
            print(
                f"tether status: warning: {code}: {message}; the status of the daemon running"
                " on its state dir, with the configuration it loaded",
                file=sys.stderr,
            )
            state_dir = found
        client = Client(state_dir, timeout=args.timeout)
        doc = client.status()
    except ClientError as exc:
        if exc.code == "owner_no_answer" and exc.details.get("timed_out"):
            record = client.running() or {}
            pid = record.get("pid")
            who = f"the daemon (pid {pid})" if pid else "the daemon"
            exc = ClientError(
                "owner_no_answer",
                f"{who} did not answer within {args.timeout:g} s: it is stopped or busy, or its"
                " storage or a bus is stalled; see its log, or ask again with a longer --timeout",
                details={**exc.details, "pid": pid, "timeout_s": args.timeout},
            )
        error_line("tether status", exc)
        return _exit.UNAVAILABLE
    except TetherError as exc:
        error_line("tether status", exc)
        return _exit.for_error(exc, default=_exit.USAGE)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return _exit.OK


def _counts_line(counts: dict[str, int]) -> str:
    """The activity counts in words: what is under way, what concluded and awaits its
    settlement by a later tick (done or failed), and how many are settled."""
    n = counts.get
    return (
        f"activities: pending {n('pending', 0)}, running {n('running', 0)}, awaiting a decision"
        f" {n('awaiting_decision', 0)}; concluded, not yet settled: done {n('done', 0)}, failed"
        f" {n('failed', 0)}; settled {n('settled', 0)}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
