"""`tether demo` / `tether replay`: the recorded example stream, its recorder, and the CLI."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from ag_ui.core import ActivityMessage
from ag_ui_validate import create_validator
from tether.agui import replay as replay_mod
from tether.cli import COMMANDS
from tether.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
STREAM = ROOT / "python" / "tether" / "agui" / "activity_stream.sse"


def test_the_shipped_stream_is_what_the_recorder_writes(tmp_path: Path) -> None:
    out = tmp_path / "stream.sse"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "record_activity_stream.py"), str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == STREAM.read_bytes()


def test_the_default_stream_is_package_data_the_recorder_writes() -> None:
    assert replay_mod.DEFAULT_STREAM.read_bytes() == STREAM.read_bytes()
    assert Path(str(replay_mod.DEFAULT_STREAM)).resolve() == STREAM.resolve()
    recorder = runpy.run_path(str(ROOT / "examples" / "record_activity_stream.py"))
    assert recorder["OUT"] == STREAM.resolve()


def test_the_shipped_stream_is_conformant() -> None:
    validator = create_validator()
    for line in STREAM.read_text(encoding="utf-8").splitlines():
        if line.startswith("data: "):
            validator.feed(json.loads(line[len("data: ") :]))
    validator.finalize()
    report = validator.report()
    assert report.summary.errors == 0 and report.summary.warnings == 0, report.diagnostics


@pytest.mark.parametrize("chunk_size", [1, 7, 4096, 1 << 20])
def test_replay_gives_the_same_store_for_any_chunking(chunk_size: int) -> None:
    store = replay_mod.replay(STREAM.read_bytes(), chunk_size=chunk_size)
    assert store.warnings == []
    acts = store.activities()
    assert [a["id"] for a in acts] == ["act-plan", "act-vision", "act-arm"]
    for a in acts:
        ActivityMessage.model_validate(a)
    assert acts[0]["content"]["status"] == "done" and acts[0]["content"]["progress"] == 100
    assert acts[1]["subagentRunId"] == "vision-1"
    assert acts[2]["content"]["status"] == "idle"


def test_demo_and_replay_are_registered() -> None:
    assert COMMANDS["demo"][0] == "tether.apps.demo.main"  # the simulation demo replaced it
    assert COMMANDS["replay"][0] == "tether.agui.replay"


def test_demo_prints_the_activity_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["replay"]) == 0
    out = capsys.readouterr().out
    assert "activity act-plan [robot_plan]" in out
    assert "activity act-vision [object_search] (subagent vision-1)" in out
    assert '  status: "idle"' in out


def test_replay_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["replay", str(STREAM), "--json", "--all", "--chunk-size", "3"]) == 0
    messages = json.loads(capsys.readouterr().out)
    assert [m["role"] for m in messages] == [
        "assistant",
        "activity",
        "activity",
        "activity",
        "assistant",
    ]
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b'{"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "content": 1}\n')
    assert cli_main(["replay", str(bad)]) == 1
    assert "AguiMalformedError" in capsys.readouterr().err
    missing = tmp_path / "missing.sse"
    assert cli_main(["replay", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"tether replay: unreadable: cannot read {missing}: No such file" in err
    assert cli_main(["replay", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert cli_main(["replay", str(STREAM), "--chunk-size", "0"]) == 2
    for junk in (b"root:x:0:0:root:/root:/bin/bash\n", b"\x00\xff\xfe", b""):
        not_a_capture = tmp_path / "junk"
        not_a_capture.write_bytes(junk)
        assert cli_main(["replay", str(not_a_capture)]) == 1, junk
        assert "no_events" in capsys.readouterr().err
    # A capture cut inside its last event (curl stopped mid-write) is said to be cut short,
    # not that its JSON is invalid; one cut after an event's last line still replays whole.
    whole = STREAM.read_bytes()
    cut = tmp_path / "cut.sse"
    for size, chunk in ((len(whole) - 40, "4096"), (len(whole) - 40, "7")):
        cut.write_bytes(whole[:size])
        assert cli_main(["replay", str(cut), "--chunk-size", chunk]) == 1
        err = capsys.readouterr().err
        assert "truncated_stream: the stream ends inside an event" in err, err
    cut.write_bytes(whole.rstrip(b"\n") + b"\n")  # no blank line after the last event
    assert cli_main(["replay", str(cut), "--json", "--all"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(messages)


def test_replay_json_is_strict_json_past_a_double(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A number past a double (1e999 reads as an infinity) was printed as `Infinity`, which
    no strict JSON parser takes: it is written as its text; other numbers stay numbers."""
    capture = tmp_path / "inf.ndjson"
    capture.write_text(
        '{"type":"RUN_STARTED","threadId":"t","runId":"r"}\n'
        '{"type":"ACTIVITY_SNAPSHOT","messageId":"m","activityType":"k",'
        '"content":{"n":1e999,"m":-1e400,"k":1.5}}\n'
    )
    assert cli_main(["replay", str(capture), "--json"]) == 0

    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    [message] = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert message["content"] == {"n": "inf", "m": "-inf", "k": 1.5}


def test_replay_shows_the_traceback_under_debug_only(tmp_path: Path) -> None:
    """`tether --debug` (or TETHER_DEBUG=1) adds the traceback to a refused capture, as every
    command's; replay ignored it."""
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b'{"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "content": 1}\n')
    for flags, env, shown in (
        ([], {}, False),
        (["--debug"], {}, True),
        ([], {"TETHER_DEBUG": "1"}, True),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "tether", *flags, "replay", str(bad)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**{k: v for k, v in os.environ.items() if k != "TETHER_DEBUG"}, **env},
        )
        assert done.returncode == 1, done.stderr
        assert ("Traceback (most recent call last)" in done.stderr) is shown, (flags, env)
        assert done.stderr.strip().splitlines()[-1].startswith("tether replay: ")


def test_replay_enforces_the_run_lifecycle_unless_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A capture cut from the middle of a run: everything after RUN_STARTED.
    frames = STREAM.read_text(encoding="utf-8").split("\n\n")
    first = next(i for i, f in enumerate(frames) if '"RUN_STARTED"' in f)
    cut = tmp_path / "mid-run.sse"
    cut.write_text("\n\n".join(frames[first + 1 :]), encoding="utf-8")
    assert cli_main(["replay", str(cut)]) == 1
    err = capsys.readouterr().err
    assert "AguiSequenceError: run_not_started" in err and "--partial" in err
    assert cli_main(["replay", str(cut), "--partial"]) == 0
    out = capsys.readouterr().out
    assert "activity act-plan [robot_plan]" in out and '  status: "idle"' in out
    store = replay_mod.replay(cut.read_bytes(), partial=True)
    assert store.lifecycle == "partial" and store.warnings == []
    assert store.activities() == replay_mod.replay(STREAM.read_bytes()).activities()
    # A second RUN_STARTED is refused in either mode.
    doubled = tmp_path / "doubled.sse"
    doubled.write_text("\n\n".join([frames[first], *frames]), encoding="utf-8")
    assert cli_main(["replay", str(doubled), "--partial"]) == 1
    assert "run_already_started" in capsys.readouterr().err


def test_missing_default_stream_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An install that lost its package data: the error must say so, not crash.
    monkeypatch.setattr(replay_mod, "DEFAULT_STREAM", tmp_path / "examples" / "gone.sse")
    assert cli_main(["replay"]) == 2
    err = capsys.readouterr().err
    assert "gone.sse" in err and "pass a stream file" in err
    assert "Traceback" not in err


def test_demo_runs_from_another_working_directory(tmp_path: Path) -> None:
    # `make demo` from a fresh clone: the default stream is found from the package, not the cwd.
    done = subprocess.run(
        [sys.executable, "-m", "tether", "replay"],  # `demo` is the simulation now
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "activity act-plan [robot_plan]" in done.stdout
