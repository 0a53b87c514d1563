"""The byte path (which takes a fast route for clean ACTIVITY_DELTA lines) against the dict
path (the general rules), on generated event sequences: same history, warnings and errors."""

from __future__ import annotations

import datetime
import json
from typing import Any, Literal

from hypothesis import given
from hypothesis import strategies as st
from tether import _core

IDS = ["a", "b", "m"]
PATHS = ["/n", "/steps/-", "/steps/0", "/s", "", "/missing/x", "/x~1y"]


scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=3)
values = scalars | st.lists(scalars, max_size=2) | st.dictionaries(st.text(max_size=2), scalars)

ops = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["add", "replace", "remove", "test", "move", "copy", "bogus"]),
        "path": st.sampled_from(PATHS),
    },
    optional={"value": values, "from": st.sampled_from(PATHS), "extra": scalars},
)

optional_members = {
    "subagentRunId": st.sampled_from(["sub-1", "sub-2"]) | st.none(),
    "metadata": st.dictionaries(st.sampled_from(["k", "j"]), scalars, max_size=2) | st.none(),
    "timestamp": st.integers(-(2**54), 2**54) | st.floats(-10, 10, allow_nan=False),
    "rawEvent": scalars,
    "surprise": scalars,
}

deltas = st.fixed_dictionaries(
    {
        "type": st.just("ACTIVITY_DELTA"),
        "messageId": st.sampled_from(IDS),
        "activityType": st.sampled_from(["t", "u"]),
        "patch": st.lists(ops, max_size=3),
    },
    optional=optional_members,
)

snapshots = st.fixed_dictionaries(
    {
        "type": st.just("ACTIVITY_SNAPSHOT"),
        "messageId": st.sampled_from(IDS),
        "activityType": st.sampled_from(["t", "u"]),
        "content": st.fixed_dictionaries({"n": scalars, "steps": st.lists(scalars, max_size=2)}),
    },
    optional={**optional_members, "replace": st.booleans()},
)

others = st.sampled_from(
    [
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
)

events = st.lists(st.one_of(deltas, deltas, snapshots, others), max_size=12)


def outcome(store: _core.ActivityStore, feed: Any, items: list[Any]) -> list[Any]:
    log: list[Any] = []
    for item in items:
        try:
            log.append([w.to_dict() for w in feed(item)])
        except _core.AguiError as e:
            log.append((type(e).__name__, e.code))
    return [*log, store.messages(), [w.to_dict() for w in store.warnings]]


# Either side of the day `rawEvent: null` stops being tolerated.
todays = st.sampled_from([datetime.date(2027, 9, 7), datetime.date(2027, 9, 8)])


RUN_STARTED = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}


@given(events, todays, st.sampled_from(["strict", "partial"]))
def test_bytes_and_dicts_agree(
    evs: list[dict[str, Any]], today: datetime.date, lifecycle: Literal["strict", "partial"]
) -> None:
    if lifecycle == "strict":
        evs = [RUN_STARTED, *evs]  # a partial capture may begin mid-run
    by_dict = _core.ActivityStore(today=today, lifecycle=lifecycle)
    want = outcome(by_dict, by_dict.handle_event, evs)
    by_line = _core.ActivityStore(today=today, lifecycle=lifecycle)
    lines = [json.dumps(e).encode() + b"\n" for e in evs]
    assert outcome(by_line, by_line.feed, lines) == want
    by_sse = _core.ActivityStore(today=today, lifecycle=lifecycle)
    frames = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in evs]
    assert outcome(by_sse, by_sse.feed, frames) == want
