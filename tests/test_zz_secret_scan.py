"""The suite-wide secret scan (issue 12): no configured secret appears in any log line or any
`--json` output of the suite's runs. Ordered last by tests/conftest.py; see tests/_secrets.py
for what is recorded and which secrets are searched for."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _secrets
from tests._secrets import RECORDER, LogRecorder, Recorder


def test_the_scanner_finds_a_planted_secret_wherever_it_is(tmp_path: Path) -> None:
    recorder = Recorder()  # not the session's: this test's plants must not fail the scan
    planted = "planted-secret-0d9f7a"
    recorder.secret(planted)
    recorder.secret("short")  # too short to search for
    assert recorder.scan() == []
    child = subprocess.run(
        [sys.executable, "-c", f"import json; print(json.dumps({{'token': {planted!r}}}))"],
        capture_output=True,
        text=True,
        check=True,
    )
    recorder.record("child --json", child.stdout)
    logger = logging.getLogger("tests.planted")
    handler = LogRecorder(recorder)
    logger.addHandler(handler)
    try:
        logger.warning("login", extra={"fields": {"auth": f'say "{planted}"'}})
    finally:
        logger.removeHandler(handler)
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "serve.log").write_text(f'{{"msg": "token={planted}"}}\n')
    (tmp_path / "notes.toml").write_text(planted)  # not a log: not searched
    recorder.files_under(tmp_path)
    recorder.record("a URL", f"GET /events?x={planted.replace('-', '%2D')}")
    recorder.record("clean", "nothing here; short")
    leaks = recorder.scan()
    where = sorted({leak.where.split(" ")[0] for leak in leaks})
    assert where == ["a", "child", "file", "log"], leaks
    assert all(leak.secret == planted and "<SECRET>" in leak.context for leak in leaks)
    assert planted not in str(leaks[0])  # the failure message does not repeat the secret


def test_the_declared_secrets_are_searched_for() -> None:
    assert set(_secrets.DECLARED) <= RECORDER.secrets


def test_no_configured_secret_appears_in_any_log_or_json_output(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    RECORDER.files_under(tmp_path_factory.getbasetemp())
    where = os.environ.get(_secrets.RECORDINGS)
    if where:  # `make pytest`: the suite ran on other processes, which dumped their recordings
        dumps = sorted(Path(where).glob("*.json"))
        assert dumps, f"{_secrets.RECORDINGS}={where} holds no recordings of the suite's run"
        for dump in dumps:
            RECORDER.load(dump)
    leaks = RECORDER.scan()
    if leaks:  # pytest.fail: an assertion's rewritten message would show the values
        more = f"\n... and {len(leaks) - 20} more" if len(leaks) > 20 else ""
        pytest.fail("\n".join(str(leak) for leak in leaks[:20]) + more, pytrace=False)
    # What was searched, for the record when it passes.
    print(json.dumps({"secrets": len(RECORDER.secrets), "outputs": len(RECORDER.texts)}))


def test_recordings_dumped_by_another_process_are_scanned(tmp_path: Path) -> None:
    """The dump and load that carry a suite process's recordings to the scan lose nothing."""
    planted = "planted-secret-in-a-worker-1c7e"
    worker = Recorder()
    worker.secret(planted)
    worker.record("a worker's child --json", json.dumps({"token": planted}))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "serve.log").write_text(f"token={planted}\n")
    worker.files_under(tmp_path / "logs")
    worker.dump(tmp_path / "gw0.json")
    scan = Recorder()
    scan.load(tmp_path / "gw0.json")
    assert planted in scan.secrets
    assert sorted(leak.where.split(" ")[0] for leak in scan.scan()) == ["a", "file"]
