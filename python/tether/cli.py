"""The `tether` command line: a thin dispatcher to one module per subcommand.

Each subcommand reports its expected failures itself (one line, its own exit codes). What
still escapes one is caught here: a Tether error or an OS error (a data dir that is a file, a
full disk) prints one line naming it and exits `EXIT_FAILED`; the traceback is shown only with
`TETHER_DEBUG=1`. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from tether.errors import TetherError

#: The exit code of a failure no subcommand handled (see the README's exit-code table).
EXIT_FAILED = 1
DEBUG_ENV = "TETHER_DEBUG"

# Subcommand -> (module with `main(argv) -> int`, one-line help). Each module owns its own
# argument parsing, so adding a command is one line here.
COMMANDS: dict[str, tuple[str, str]] = {}

# --- demo ---
COMMANDS["demo"] = (
    "tether.apps.demo.main",
    "run the main job: a planner drives seeded MuJoCo reaches as durable activities",
)
COMMANDS["replay"] = (
    "tether.agui.replay",
    "replay an AG-UI stream (SSE/NDJSON) through the activity store",
)


# --- emulators ---
COMMANDS["emulate"] = (
    "tether.emulators.cli",
    "run a device emulator: tether emulate dynamixel --ids 1,2",
)


# --- operator ---
COMMANDS["operator"] = (
    "tether.operator.cli",
    "list, show, resolve parked Activities; resume, reboot robots; hash a credential",
)


# --- host ---
COMMANDS["host"] = (
    "tether.devices.cli",
    "own the configured robots until SIGTERM (safe-stops on exit)",
)
COMMANDS["move"] = (
    "tether.adapters.dynamixel.worker",
    "run one robot move to a conclusion (reconciles first)",
)
COMMANDS["stop"] = (
    "tether.operator.stop",
    "safe-stop every configured robot, also while a host owns it",
)
COMMANDS["worker"] = ("tether.runtime.worker_main", "run Activity worker threads on a data dir")

# --- store maintenance ---
COMMANDS["db"] = (
    "tether.activities.dbcli",
    "maintain the stores: prune settled Activities; schema status and upgrade",
)


def _usage() -> str:
    lines = ["usage: tether <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in sorted(COMMANDS.items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `tether` subcommand and return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"tether: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        code: int = module.main(rest)
    except (TetherError, OSError) as exc:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        print(f"tether {name}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return code


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{type(exc).__name__}: {exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


if __name__ == "__main__":
    raise SystemExit(main())
