"""The demo's progress lines, milestone printing and summary table."""

from __future__ import annotations

import io

from tether.apps.demo.console import (
    ActivityRow,
    ProgressBoard,
    SummaryRow,
    progress_line,
    summary_table,
)


def test_progress_line_shows_bar_steps_error_and_attempt() -> None:
    line = progress_line(
        ActivityRow("reach-0001", attempt=2, done=500, total=1000, error=0.0123, state="running")
    )
    assert "[" + "#" * 12 + "-" * 12 + "]" in line
    assert "500/1000" in line and "err 0.0123 m" in line and "attempt 2" in line
    assert line.endswith("running")


def test_board_without_a_tty_prints_each_quarter_once() -> None:
    out = io.StringIO()
    board = ProgressBoard(out)
    for done in range(0, 1001, 50):
        board.update("reach-0000", attempt=1, done=done, total=1000, error=0.1, state="running")
    board.update("reach-0000", state="settled")
    lines = out.getvalue().splitlines()
    assert len(lines) == 6  # quarters 0..4 and the state change
    assert lines[-1].endswith("settled")


def test_summary_table_aligns_columns_and_shortens_digests() -> None:
    rows = [
        SummaryRow("reach-0000", 1, "sha256:" + "ab" * 32, 2, 4, 1.234, "-"),
        SummaryRow("reach-0001", 2, "sha256:" + "cd" * 32, 5, None, 0.5, "result reused"),
    ]
    table = summary_table(rows).splitlines()
    assert table[0].split() == [
        "activity",
        "attempts",
        "result",
        "digest",
        "source",
        "settled",
        "time",
        "s",
        "recovered",
    ]
    assert set(table[1]) <= {"-", " "}
    assert "abababababababab" in table[2] and "ab" * 17 not in table[2]
    assert table[3].split()[4] == "-" and table[3].endswith("result reused")


def test_an_arm_moves_line_shows_radians_to_go() -> None:
    from tether.apps.demo.main import _radians_to_go

    progress = {
        "fraction": 0.5,
        "joints": {
            "a": {"present_rad": 0.25, "goal_rad": 0.5, "moving": True},
            "b": {"present_rad": -0.1, "goal_rad": -0.3, "moving": True},
        },
    }
    err = _radians_to_go(progress)
    assert err is not None and abs(err - 0.25) < 1e-9
    assert _radians_to_go({"fraction": 1.0}) is None
    line = progress_line(ActivityRow("move-0001", 1, 50, 100, err, unit="rad", state="moving"))
    assert "err 0.2500 rad" in line and " m " not in line
