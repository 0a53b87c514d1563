"""AG-UI activity messages: the Rust-backed consumer store and the producer-side publisher.

A producer turns successive contents into events; a consumer's store rebuilds the messages:

>>> from tether.agui import ActivityPublisher, ActivityStore, encode_sse
>>> pub = ActivityPublisher("act-1", "robot_task", clock=lambda: 1_764_489_600_000)
>>> store = ActivityStore()
>>> store.handle_event({"type": "RUN_STARTED", "threadId": "cell-7", "runId": "run-1"})
[]
>>> for content in ({"status": "moving", "steps": []}, {"status": "done", "steps": ["grasp"]}):
...     event = pub.update(content)
...     store.feed(encode_sse(event).encode())  # or store.handle_event(event)
[]
[]
>>> store.activities()
[{'id': 'act-1', 'role': 'activity', 'activityType': 'robot_task', \
'content': {'status': 'done', 'steps': ['grasp']}}]
>>> store.handle_event({"type": "ACTIVITY_DELTA", "messageId": "nope",
...                     "activityType": "robot_task", "patch": []})[0].code
'delta_target_missing'
"""

from tether._core import (
    AguiAttributionError,
    AguiDecodeError,
    AguiError,
    AguiMalformedError,
    AguiSequenceError,
    AguiWarning,
    agui_error_codes,
    agui_warning_codes,
)
from tether.agui._publisher import ActivityPublisher, encode_sse, to_model
from tether.agui._store import RAW_EVENT_NULL_EXPIRES, ActivityStore, Lifecycle
from tether.agui.live import LiveActivities, message_id
from tether.agui.stream import RunStream, StoreState, StreamServer, sse_frame

# Every code an `AguiWarning` can carry, with its meaning (kept equal to the Rust list by a test).
WARNING_CODES: dict[str, str] = {
    "unknown_event_type": "an event of a type the store does not know was dropped",
    "unknown_property": "members the event or message does not describe were stripped",
    "unknown_message_role": "a MESSAGES_SNAPSHOT message with an unknown role was dropped",
    "delta_target_missing": "an ACTIVITY_DELTA named no held message; skipped",
    "delta_target_not_activity": "an ACTIVITY_DELTA named a non-activity message; skipped",
    "snapshot_target_not_activity": "an ACTIVITY_SNAPSHOT named a non-activity message; skipped",
    "patch_not_applied": "a well-formed patch did not apply; content and type kept",
    "patch_result_not_object": "a patch would leave non-object content; content and type kept",
    "patch_op_dropped": "an operation with an unknown `op` was dropped (warned first, whatever "
    "happens to the rest of the patch)",
    "text_message_missing": "a text event named no started message; skipped",
    "text_message_conflict": "a text event named an activity message; skipped",
    "content_too_deep": "a delta could nest content deeper than 512 levels; skipped",
    "content_too_large": "a delta could make content heavier than 64 MiB (or twice its last "
    "snapshot); skipped",
    "raw_event_null": "`rawEvent: null` was taken as absent (deprecated; fatal from 2027-09-08)",
}

# Every code an `AguiError` can carry (`error.code`), with its meaning.
ERROR_CODES: dict[str, str] = {
    "invalid_json": "the bytes of one event are not JSON (AguiDecodeError)",
    "truncated_stream": "the input ends inside an event (AguiDecodeError)",
    "event_not_object": "an event is not a JSON object",
    "missing_type": "an event has no string `type`",
    "missing_field": "a required member is missing",
    "wrong_type": "a described member has the wrong JSON type",
    "null_value": "a described member is null (absent values are left out)",
    "fractional_timestamp": "`timestamp` is not an integer",
    "timestamp_out_of_range": "`timestamp` is outside +-(2^53 - 1)",
    "malformed_patch": "an ACTIVITY_DELTA patch is malformed (RFC 6902 / bad pointer)",
    "duplicate_message_id": "a MESSAGES_SNAPSHOT repeats a message id",
    "attribution_mismatch": "a delta's subagentRunId differs from the owner (AguiAttributionError)",
    "run_not_started": "the first event is not RUN_STARTED or RUN_ERROR (AguiSequenceError)",
    "run_already_started": "a second RUN_STARTED while a run is open (AguiSequenceError)",
    "run_id_mismatch": "RUN_FINISHED names another thread or run than the open one "
    "(AguiSequenceError)",
    "event_after_run_finished": "an event other than RUN_STARTED/RUN_ERROR after RUN_FINISHED "
    "or RUN_ERROR (AguiSequenceError)",
    "non_finite_number": "a float given in a dict is NaN or infinite (JSON has neither)",
}

__all__ = [
    "ERROR_CODES",
    "RAW_EVENT_NULL_EXPIRES",
    "WARNING_CODES",
    "ActivityPublisher",
    "ActivityStore",
    "AguiAttributionError",
    "AguiDecodeError",
    "AguiError",
    "AguiMalformedError",
    "AguiSequenceError",
    "AguiWarning",
    "Lifecycle",
    "LiveActivities",
    "RunStream",
    "StoreState",
    "StreamServer",
    "agui_error_codes",
    "agui_warning_codes",
    "encode_sse",
    "message_id",
    "sse_frame",
    "to_model",
]
