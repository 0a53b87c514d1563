"""The `tether` command line: a thin dispatcher to one module per subcommand.

    tether [--debug] [--version [--json]] <command> [args...]

Each subcommand reports its expected failures itself (one line, the codes of `tether._exit`).
What still escapes one is caught here: a Tether error or an OS error (a data dir that is a
file, a full disk) prints one line naming it and exits with the code `tether._exit.for_error`
gives it (the README's exit-code table); Ctrl-C is one line and `INTERRUPTED`. The traceback is
shown only with `--debug` (or `TETHER_DEBUG=1`, which `--debug` sets for the subcommand too).
Anything else is a bug: its traceback is printed and the exit code is `INTERNAL`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence

from tether import _args, _exit
from tether._dirs import private_umask
from tether.errors import TetherError

#: The exit code of a failure no subcommand handled and that names no more precise code.
EXIT_FAILED = _exit.FAILED
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
COMMANDS["serve"] = (
    "tether.serve.cli",
    "run the robot-host daemon: devices, Activities, AG-UI stream, control socket",
)
COMMANDS["status"] = (
    "tether.serve.status",
    "the daemon's devices, Activities by state and parked decisions",
)
COMMANDS["worker"] = ("tether.runtime.worker_main", "run Activity worker threads on a data dir")

# --- store maintenance ---
COMMANDS["db"] = (
    "tether.activities.dbcli",
    "maintain the stores: prune settled Activities; schema status and upgrade",
)


def _usage() -> str:
    lines = [
        "usage: tether [--debug] [--version [--json]] <command> [args...]",
        "",
        "options:",
        "  -h, --help     show this message and exit",
        "  --version      print the package version and exit (--json: one JSON object)",
        "  --debug        show the traceback of an expected error (also TETHER_DEBUG=1)",
        "",
        "commands (each has --help):",
    ]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in sorted(COMMANDS.items())]
    lines += ["", "Exit codes (the same for every command):"]
    lines += [f"  {c.value:<3} {c.name.lower():<14} {c.meaning}" for c in _exit.CODES]
    return "\n".join(lines)


def version() -> str:
    """The installed package's version."""
    from tether import __version__

    return str(__version__)


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV) == "1"


def _closed_streams_to_null() -> None:
    """A standard stream the process was started without (`tether serve >&-`, a service
    manager's closed stdout) reads or writes `/dev/null` on its own descriptor: Python leaves
    it None, and `sys.stdout.isatty()` was an internal error (exit 70); and a file opened
    later would take descriptor 1 or 2, where a stray write would land in it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, mode, closefd=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `tether` subcommand and return its exit code."""
    private_umask()  # files any command creates are 0600, directories 0700
    _closed_streams_to_null()
    # grpcio's C core writes its own INFO lines to stderr (a TLS handshake a peer failed, a
    # goaway), raw text amid the JSON log, one per retry; its errors still show. Before grpc
    # is imported (lazily, by the commands that use it); a value the user set stands.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    args = list(sys.argv[1:] if argv is None else argv)
    flags: set[str] = set()
    while args and args[0] in {"--debug", "--version", "--json"}:
        flags.add(args.pop(0))
    if "--debug" in flags:
        os.environ[DEBUG_ENV] = "1"  # the subcommands' own handlers read it too
    if "--version" in flags:
        if "--json" in flags:
            print(json.dumps({"name": "tether", "version": version()}))
        else:
            print(f"tether {version()}")
        return _exit.OK
    if "--json" in flags:  # asked for JSON: the refusal is a JSON document too
        _args.want_json()
        _args.refuse(
            "tether",
            "usage",
            "--json goes with --version or after a command",
            error="UsageError",
        )
        return _exit.USAGE
    try:
        return _dispatch(args)
    except BrokenPipeError:  # the reader went away (`tether ... | head`): not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _exit.OK


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return _exit.OK if args else _exit.USAGE
    name, rest = args[0], args[1:]
    if "--json" in rest:
        _args.want_json()  # a refusal escaping the command is also a JSON document
    if name not in COMMANDS:
        near = _nearest(name)
        hint = f"; did you mean {near!r}?" if near else ""
        _args.refuse(
            "tether",
            "usage",
            f"unknown command {name!r}{hint} (see `tether --help`)",
            error="UsageError",
            details={"command": name, **({"did_you_mean": near} if near else {})},
        )
        return _exit.USAGE
    try:
        module = importlib.import_module(COMMANDS[name][0])
        code: int = module.main(rest)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt as exc:
        if _debug():
            traceback.print_exc()
        _args.interrupted(f"tether {name}", getattr(exc, "signal_name", "SIGINT"))
        return _exit.INTERRUPTED
    except (TetherError, OSError) as exc:
        if _debug():
            traceback.print_exc()
        if (sig := _interrupt_in(exc)) is not None:
            _args.interrupted(f"tether {name}", sig)
            return _exit.INTERRUPTED
        err_code, message, details = _args.error_fields(exc)
        _args.refuse(
            f"tether {name}",
            err_code,
            message,
            error=type(exc).__name__,
            details=details,
            line=_one_line(exc, err_code, message),
        )
        return _exit.for_error(exc)
    except Exception as exc:  # a bug: keep its traceback, and a code no expected failure uses
        if (sig := _interrupt_in(exc)) is not None:
            # Ctrl-C that an import or a library wrapped in an error of its own (mujoco's
            # "initialization failed", a class's `__set_name__`): an interruption all the same.
            if _debug():
                traceback.print_exc()
            _args.interrupted(f"tether {name}", sig)
            return _exit.INTERRUPTED
        traceback.print_exc()
        _args.refuse(
            f"tether {name}",
            "internal",
            "internal error (a bug in Tether; please report it)",
            error="InternalError",
            line="internal error (a bug in Tether; please report it)",
        )
        return _exit.INTERNAL
    return code


def _interrupt_in(exc: BaseException) -> str | None:
    """The signal's name when a `KeyboardInterrupt` (SIGINT, or a signal the command turned
    into one) is in ``exc``'s chain of causes, else None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, KeyboardInterrupt):
            return str(getattr(cause, "signal_name", "SIGINT"))
        cause = cause.__cause__ or cause.__context__
    return None


def _nearest(name: str) -> str | None:
    import difflib

    found = difflib.get_close_matches(name, list(COMMANDS), n=1)
    return found[0] if found else None


def _one_line(exc: BaseException, code: str, message: str) -> str:
    """The error's line: its stable code and message where it has one (a storage failure's
    kind too), else its class and text."""
    from tether._sqlite_files import storage_failure

    if isinstance(getattr(exc, "code", None), str) or storage_failure(exc) is not None:
        return _args.coded_line(code, message)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{type(exc).__name__}: {exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


if __name__ == "__main__":
    raise SystemExit(main())
