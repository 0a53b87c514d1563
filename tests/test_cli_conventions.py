"""The conventions every `tether` command keeps: `--version`, `--help` naming every flag's
default, one exit-code table (`tether._exit`, the README's), one line and no traceback for an
expected error (the traceback with `--debug`)."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tether
from tether import _args, _exit
from tether.cli import COMMANDS
from tether.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "tether"

#: Each command -> the module constant listing the exit codes it documents.
DOCUMENTED: dict[str, tuple[str, str]] = {
    "demo": ("tether.apps.demo.main", "EXIT_CODES"),
    "replay": ("tether.agui.replay", "EXIT_CODES"),
    "emulate": ("tether.emulators.cli", "EXIT_CODES"),
    "operator": ("tether.operator.cli", "EXIT_CODES"),
    "host": ("tether.devices.cli", "HOST_EXIT_CODES"),
    "move": ("tether.adapters.dynamixel.worker", "EXIT_CODES"),
    "stop": ("tether.devices.cli", "STOP_EXIT_CODES"),
    "worker": ("tether.runtime.worker_main", "EXIT_CODES"),
    "db": ("tether.activities.dbcli", "EXIT_CODES"),
    "serve": ("tether.serve.cli", "EXIT_CODES"),
    "status": ("tether.serve.status", "EXIT_CODES"),
}

#: Every `--help` a user can ask for: each command, each command's commands.
HELPS = [[name, "--help"] for name in sorted(COMMANDS)] + [["emulate", "dynamixel", "--help"]]


def tether_run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def documented(command: str) -> tuple[int, ...]:
    module, name = DOCUMENTED[command]
    codes: tuple[int, ...] = getattr(importlib.import_module(module), name)
    return codes


def test_version_prints_the_package_version_also_as_json() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    done = tether_run("--version")
    assert done.returncode == 0 and done.stdout == f"tether {project['version']}\n"
    as_json = tether_run("--version", "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout) == {"name": "tether", "version": tether.__version__}
    assert tether.__version__ == project["version"]


def test_every_command_is_listed_with_the_exit_codes() -> None:
    done = tether_run("--help")
    assert done.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in done.stdout
    for code in _exit.CODES:
        assert re.search(rf"^  {code.value}\s+{code.name.lower()}\s", done.stdout, re.M), code


def _parsers_of(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> list[_args.Parser]:
    """Every parser a command builds to answer `--help` (in this process)."""
    made: list[_args.Parser] = []

    class Recorder(set[Any]):
        def add(self, parser: Any) -> None:
            made.append(parser)

    monkeypatch.setattr(_args, "PARSERS", Recorder())
    with pytest.raises(SystemExit) as info:
        code = cli_main(argv)
        raise SystemExit(code)
    assert info.value.code == 0, argv
    return made


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a[:-1]))
def test_help_names_every_flags_default(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parsers = _parsers_of(argv, monkeypatch)
    if argv == ["emulate", "--help"]:  # a dispatcher to the emulators, which have their own
        assert not parsers and "dynamixel" in capsys.readouterr().out
        return
    assert parsers, f"{argv} builds no tether._args.Parser"
    checked = 0
    for parser in parsers:
        text = " ".join(parser.format_help().split())
        assert "(required) (required)" not in text, parser.prog  # said once
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if action.option_strings:
                assert action.option_strings[-1] in text, (parser.prog, action.dest)
                assert _args.describes_default(parser, action), (parser.prog, action.dest)
                helped = " ".join((parser._get_formatter()._expand_help(action)).split())
                assert helped in text, (parser.prog, helped)
                checked += 1
            else:
                assert action.help, f"{parser.prog}: positional {action.dest} has no help"
    assert checked >= 1


def test_every_command_line_module_uses_the_one_parser_and_the_one_table() -> None:
    """No module builds a bare argparse parser or writes an exit code as a literal."""
    cli_modules = {importlib.import_module(m).__file__ for m, _ in DOCUMENTED.values() if m} | {
        str(PACKAGE / "emulators" / "dynamixel.py"),
        str(PACKAGE / "cli.py"),
    }
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if path.name != "_args.py":
            assert "argparse.ArgumentParser(" not in text, path
        if str(path) in cli_modules:
            assert not re.search(r"^EXIT_\w+(, \w+)* = [0-9]", text, re.M), path
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef) and node.name.endswith("main"):
                    for ret in ast.walk(node):
                        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Constant):
                            raise AssertionError(f"{path}:{ret.lineno}: a literal exit code")


@pytest.mark.parametrize("command", sorted(DOCUMENTED))
def test_each_commands_documented_codes_come_from_the_one_table(command: str) -> None:
    codes = documented(command)
    assert codes and set(codes) <= set(_exit.BY_VALUE), codes
    assert _exit.OK in codes and _exit.USAGE in codes
    argv = [command, "dynamixel", "--help"] if command == "emulate" else [command, "--help"]
    help_text = " ".join(tether_run(*argv).stdout.split())
    said = help_text.split("exit codes:", 1)[1]
    named = {int(n) for n in re.findall(r"(?:^|[;,]) ?(\d+) ", said)}
    if command == "emulate":
        assert named <= set(codes)
    else:
        assert named == set(codes), (command, named, codes)


def test_the_readme_table_is_the_modules() -> None:
    readme = (ROOT / "README.md").read_text()
    assert _exit.markdown_table() in readme
    values = [c.value for c in _exit.CODES]
    assert len(values) == len(set(values)) and len({c.name for c in _exit.CODES}) == len(values)
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for command in DOCUMENTED:
        row = next(line for line in section.splitlines() if line.startswith(f"| `tether {command}"))
        listed = {int(n) for n in re.findall(r"\b(\d+)\b", row.split("|")[2])}
        assert listed == set(documented(command)), (command, listed)


def test_error_codes_map_to_one_exit_code_each() -> None:
    from tether._config import HostConfigError
    from tether._dirs import DataDirError
    from tether._sqlite_files import StoreFileError
    from tether.transport import PortBusy

    assert _exit.for_error(HostConfigError("unknown_key", "x")) == _exit.USAGE
    assert _exit.for_error(DataDirError("not_a_directory", "x")) == _exit.USAGE
    assert _exit.for_error(StoreFileError("store_truncated", "x")) == _exit.STORE_UNUSABLE
    assert _exit.for_error(OSError(28, "No space left on device")) == _exit.STORAGE_IO
    assert _exit.for_error(PortBusy("port_owned", "x")) == _exit.UNAVAILABLE
    assert _exit.for_error(FileNotFoundError(2, "No such file")) == _exit.USAGE
    assert _exit.for_error(RuntimeError("x")) == _exit.FAILED


# --- bad input: one line, no traceback, the table's code ----------------------------------

CONFIG = """
[host]
state_dir = "{state}"
[ports.bus]
url = "/dev/does-not-exist"
[robots.arm]
port = "bus"
[[robots.arm.joints]]
name = "a"
id = 1
min = -1
max = 1
"""
FAMILIES = "tether.families.robot_move.family:families_from_env"


def _names(tmp_path: Path) -> dict[str, str]:
    a_file = tmp_path / "a-file"
    a_file.write_text("precious\n")
    config = tmp_path / "host.toml"
    config.write_text(CONFIG.format(state=tmp_path / "state"))
    return {
        "file": str(a_file),
        "missing": str(tmp_path / "missing.toml"),
        "config": str(config),
        "dir": str(tmp_path / "data"),
    }


BAD = [
    # an unknown flag, for every command
    *([name, "--no-such-flag"] for name in sorted(COMMANDS)),
    (["host", "serve", "--no-such-flag"]),
    (["db", "prune", "--no-such-flag"]),
    (["emulate", "dynamixel", "--no-such-flag"]),
    (["operator", "--config", "{config}", "list", "--no-such-flag"]),
    # a bad value
    (["demo", "--port", "-1"]),
    (["db", "prune", "--data-dir", "{dir}", "--older-than", "soon"]),
    (["emulate", "dynamixel", "--ids", "one"]),
    (["emulate", "nothing"]),
    (["replay", "--chunk-size", "0"]),
    # a missing file
    (["stop", "--config", "{missing}"]),
    (["host", "serve", "--config", "{missing}"]),
    (["operator", "--config", "{missing}", "list"]),
    (["move", "--config", "{missing}", "--robot", "arm", "--activity", "m", "--joint", "a=1"]),
    (["replay", "{missing}"]),
    (["db", "prune", "--data-dir", "{missing}", "--older-than", "1d"]),
    # a bad URL
    (["db", "status", "mysql://h/x"]),
    (["db", "upgrade", "sqlite://relative.db"]),
    (["worker", "{dir}", "--families", FAMILIES, "--catalog", "mysql://h/x"]),
    # a data dir that is a file
    (["demo", "--port", "0", "--data-dir", "{file}"]),
    (["operator", "--data-dir", "{file}", "list"]),
    (["db", "prune", "--data-dir", "{file}", "--older-than", "1d"]),
    (["worker", "{file}", "--families", FAMILIES]),
    # a bad request
    (["move", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint", "a"]),
    (["stop", "--config", "{config}", "--robot", "amr"]),
    # a joint given twice, a timeout or a lease out of range, two credential sources
    (["move", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint", "a=0.1",
      "--joint", "a=0.2"]),
    (["move", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint", "a=0.1",
      "--settle-timeout", "-1"]),
    (["move", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint", "a=0.1",
      "--settle-timeout", "nan"]),
    (["move", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint", "a=0.1",
      "--lease-ms", "0"]),
    (["operator", "--config", "{config}", "resume", "arm", "--credential-stdin",
      "--credential-file", "{file}"]),
]  # fmt: skip


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a))
def test_bad_input_is_one_line_without_a_traceback(tmp_path: Path, argv: list[str]) -> None:
    names = _names(tmp_path)
    done = tether_run(
        *(a.format(**names) for a in argv), env={"TETHER_HOST_CONFIG": names["config"]}
    )
    assert done.returncode == _exit.USAGE, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    said = (done.stderr or done.stdout).strip()
    assert said and "\n" not in said, said
    assert said.startswith(("tether", '{"status": "refused"')), said
    assert Path(names["file"]).read_text() == "precious\n"


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path: Path) -> None:
    names = _names(tmp_path)
    for argv, env in (
        (["--debug", "stop", "--config", names["missing"]], {}),
        (["stop", "--config", names["missing"]], {"TETHER_DEBUG": "1"}),
        (["--debug", "worker", names["file"], "--families", FAMILIES], {}),
    ):
        done = tether_run(*argv, env={"TETHER_HOST_CONFIG": names["config"], **env})
        assert done.returncode == _exit.USAGE, done.stderr
        assert "Traceback (most recent call last)" in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("tether ")


def test_an_unknown_command_suggests_the_nearest(tmp_path: Path) -> None:
    done = tether_run("stpo")
    assert done.returncode == _exit.USAGE
    assert done.stderr.strip() == (
        "tether: usage: unknown command 'stpo'; did you mean 'stop'? (see `tether --help`)"
    )
    assert tether_run().returncode == _exit.USAGE
    assert tether_run("--json").returncode == _exit.USAGE


def test_a_top_level_usage_error_asked_for_as_json_is_a_json_document() -> None:
    # A script that passes --json reads one JSON document on stdout, also when the command
    # itself is unknown or --json stands where no command takes it.
    for argv, words in (
        (("stpo", "--json"), "unknown command 'stpo'"),
        (("--json",), "--json goes with --version or after a command"),
        (("--json", "stop"), "--json goes with --version or after a command"),
    ):
        done = tether_run(*argv)
        assert done.returncode == _exit.USAGE, done
        doc = json.loads(done.stdout)
        assert doc["status"] == "refused" and doc["code"] == "usage", doc
        assert words in doc["message"], doc
        assert words in done.stderr
    assert json.loads(tether_run("stpo", "--json").stdout)["details"] == {
        "command": "stpo",
        "did_you_mean": "stop",
    }
    assert tether_run("stpo").stdout == ""  # no --json: the line on stderr only


def test_a_misspelled_option_is_named_before_the_required_one_it_hides(tmp_path: Path) -> None:
    """`--decison` made `--decision` look missing, and the error named only that: the unknown
    option is named first, with the nearest known one."""
    done = tether_run("operator", "resolve", "K", "--decison", "reissue", "--revision", "1")
    assert done.returncode == _exit.USAGE
    assert done.stderr.splitlines()[0] == (
        "tether operator resolve: usage: unrecognized arguments: --decison (did you mean"
        " --decision?); the following arguments are required: --decision (see `tether operator"
        " resolve --help`)"
    )
    # The same in a command whose subcommands raise their own usage error (`tether db`).
    prune = tether_run("db", "prune", "--data-dir", str(tmp_path), "--older-thn", "1d")
    assert prune.returncode == _exit.USAGE
    assert prune.stderr.splitlines()[0].startswith(
        "tether db: usage: unrecognized arguments: --older-thn (did you mean --older-than?);"
        " the following arguments are required: --older-than"
    ), prune.stderr
    # A value that starts with "--" but holds a space is a value to argparse, not an option.
    note = tether_run("operator", "resolve", "K", "--note", "--force it now", "--revision", "1")
    assert note.returncode == _exit.USAGE and "unrecognized" not in note.stderr, note.stderr
    # An abbreviation argparse takes is no misspelling: only the missing one is named.
    short = tether_run("move", "--config", str(tmp_path / "h.toml"), "--rob", "arm", "--json")
    assert short.returncode == _exit.USAGE
    assert "unrecognized" not in short.stderr and "--activity" in short.stderr, short.stderr


def test_demo_json_is_one_object_on_stdout_with_progress_on_stderr(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = tether_run(
        "demo", "--data-dir", str(data), "--targets", "1", "--episodes", "1", "--steps", "100",
        "--port", "0", "--json", "--moves", "0",
    )  # fmt: skip
    assert done.returncode == _exit.OK, done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["exit_code"], report["parked"]) == ("done", 0, [])
    assert [a["activity"] for a in report["activities"]] == ["reach-0000"]
    assert "reach-0000" in done.stderr and "mission:" in done.stderr


#: The commands that take `--json`, and where their `--json` goes.
JSON_BAD = [
    (["status", "--config", "{missing}", "--json"]),
    (["status", "--json", "--no-such-flag"]),
    (["operator", "--json", "--config", "{missing}", "list"]),
    (["operator", "--json", "--data-dir", "{file}", "list"]),
    (["operator", "--json", "lis"]),
    (["db", "status", "--json", "mysql://h/x"]),
    (["db", "prune", "--json", "--data-dir", "{missing}", "--older-than", "1d"]),
    (["replay", "--json", "{missing}"]),
    (["replay", "--json", "--chunk-size", "0"]),
    (["stop", "--json", "--config", "{missing}"]),
    (["stop", "--json", "--config", "{config}", "--robot", "amr"]),
    (["host", "serve", "--json", "--config", "{missing}"]),
    (["serve", "--json", "--config", "{missing}"]),
    (
        [
            "move",
            "--json",
            "--config",
            "{missing}",
            "--robot",
            "arm",
            "--joint",
            "a=0.1",
            "--activity",
            "m",
        ]
    ),
    (["demo", "--json", "--port", "-1"]),
    (["demo", "--json", "--port", "0", "--data-dir", "{file}"]),
    (["move", "--json", "--config", "{config}", "--robot", "arm", "--activity", "m", "--joint",
      "a=x"]),
]  # fmt: skip


@pytest.mark.parametrize("argv", JSON_BAD, ids=lambda a: " ".join(a))
def test_a_refusal_with_json_is_one_document_on_stdout_and_one_line_on_stderr(
    tmp_path: Path, argv: list[str]
) -> None:
    names = _names(tmp_path)
    done = tether_run(
        *(a.format(**names) for a in argv), env={"TETHER_HOST_CONFIG": names["config"]}
    )
    assert done.returncode == _exit.USAGE, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    doc = json.loads(lines[0])
    assert doc["status"] == "refused", doc
    assert isinstance(doc["code"], str) and re.fullmatch(r"[a-z][a-z0-9_]*", doc["code"]), doc
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(doc["error"])), doc  # a class's name
    assert doc["message"] and "\n" not in doc["message"] and isinstance(doc["details"], dict)
    said = done.stderr.strip().splitlines()[-1]  # after the demo's progress lines, if any
    assert said.startswith("tether"), said
    assert doc["message"] in said or doc["code"] in said, (doc, said)
    assert Path(names["file"]).read_text() == "precious\n"


def test_without_json_a_refusal_leaves_stdout_empty(tmp_path: Path) -> None:
    names = _names(tmp_path)
    for argv in (["status", "--config", names["missing"]], ["replay", names["missing"]]):
        done = tether_run(*argv)
        assert done.returncode == _exit.USAGE and done.stdout == "", done.stdout
        assert done.stderr.startswith("tether ")


def test_the_demo_tells_a_held_port_from_a_refused_address(tmp_path: Path) -> None:
    """A stream port another process holds is `sse_unavailable` (exit 7, not this command's
    fault); an address off loopback without TLS is `insecure_listener` (exit 2)."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        busy = tether_run(
            "demo", "--json", "--moves", "0", "--data-dir", str(tmp_path / "d"), "--port", port
        )
    assert busy.returncode == _exit.UNAVAILABLE, busy.stdout + busy.stderr
    assert json.loads(busy.stdout)["code"] == "sse_unavailable"
    assert busy.stderr.strip().startswith("tether demo: sse_unavailable: ")
    wide = tether_run(
        "demo", "--json", "--moves", "0", "--data-dir", str(tmp_path / "e"), "--host", "0.0.0.0"
    )
    assert wide.returncode == _exit.USAGE, wide.stdout + wide.stderr
    assert json.loads(wide.stdout)["code"] == "insecure_listener"


def test_the_demos_help_says_what_it_does_in_whole_sentences() -> None:
    done = tether_run("demo", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "with one power loss that walks the operator path." in text, text


@pytest.mark.parametrize("command", ["serve", "move", "operator"])
def test_a_command_started_with_stdout_closed_says_its_refusal_never_an_internal_error(
    tmp_path: Path, command: str
) -> None:
    """`tether serve >&-` (a service manager's closed stdout) was an internal error (exit 70,
    `'NoneType' object has no attribute 'isatty'`) before its configuration was read."""
    import shlex

    argv = [sys.executable, "-m", "tether", command, "--config", str(tmp_path / "none.toml")]
    if command == "operator":
        argv.append("list")
    if command == "move":
        argv += ["--robot", "arm", "--activity", "m1", "--joint", "a=0.1"]
    done = subprocess.run(
        ["bash", "-c", f"exec {shlex.join(argv)} >&-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "unreadable" in done.stderr and "internal error" not in done.stderr, done.stderr


def test_tether_move_on_a_bridge_host_says_where_its_robots_are(tmp_path: Path) -> None:
    """A bridge host's `tether move` said only `no robot 'arm' (configured: none)`."""
    config = tmp_path / "host.toml"
    config.write_text(
        '[host]\nstate_dir = "state"\n[remote]\naddress = "127.0.0.1:50551"\n'
        'token_file = "planner.token"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot", "arm",
         "--activity", "m1", "--joint", "a=0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "unknown_robot" in line and "bridge host" in line and "127.0.0.1:50551" in line, line
