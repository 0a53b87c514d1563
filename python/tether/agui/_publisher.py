"""The producer side of AG-UI activity: snapshot first, then deltas, never a malformed event.

Rules the publisher keeps (AG-UI draft, activity and snapshot-delta pattern):
- the first event for an activity is an ACTIVITY_SNAPSHOT; a delta never precedes it;
- later changes are ACTIVITY_DELTA events whose patch is `tether.patch.diff(old, new)`, or a
  fresh snapshot when the patch would be larger than the content it describes;
- `content` is always a JSON object (checked, never coerced: a non-str key or a tuple is an
  error), `timestamp` an integer of milliseconds within +-(2^53 - 1), and attribution
  (`subagentRunId`) is left out for the parent agent, never sent as null;
- every delta repeats the activity type (the field is required; a new type retypes).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from ag_ui.core import ActivityDeltaEvent, ActivitySnapshotEvent, BaseEvent
from ag_ui.encoder import EventEncoder

from tether.patch import diff

__all__ = ["ActivityPublisher", "encode_sse", "to_model"]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# The deepest content accepted; deeper (or cyclic) content is refused, not a RecursionError.
_MAX_DEPTH = 500

# The AG-UI schema bounds `timestamp` to the integers a JSON double holds exactly.
_MAX_SAFE_INTEGER = 2**53 - 1


def _check_json(value: Any, at: str, depth: int) -> None:
    """Raise ValueError unless `value` is JSON as it stands (nothing coerced on the way)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"{at}: nested deeper than {_MAX_DEPTH} levels (or cyclic)")
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{at}: {value!r} is not a JSON number")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                # json.dumps would silently turn 1 into "1" and True into "true".
                raise ValueError(f"{at}: object keys must be str, got {type(key).__name__} {key!r}")
            _check_json(item, f"{at}/{key.replace('~', '~0').replace('/', '~1')}", depth + 1)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{at}/{i}", depth + 1)
        return
    # Tuples included: json.dumps would silently make them arrays.
    raise ValueError(f"{at}: a value of type {type(value).__name__} is not JSON")


def _json_copy(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A checked deep copy: proves the value is a JSON object and detaches it from the caller."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping (a JSON object), got {type(value).__name__}")
    top = dict(value)
    try:
        _check_json(top, what, 0)
    except ValueError as e:
        raise ValueError(f"{what} is not JSON: {e}") from None
    copied = json.loads(json.dumps(top, allow_nan=False))
    if not isinstance(copied, dict):  # pragma: no cover - a Mapping always dumps as an object
        raise TypeError(f"{what} must be a JSON object")
    return copied


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


class ActivityPublisher:
    """Turns successive contents of one activity message into AG-UI events (wire dicts).

    Sans-I/O: it returns events and sends nothing. Time comes from `now_ms` or the `clock`
    given at construction (integer milliseconds). Single owner.
    """

    def __init__(
        self,
        message_id: str,
        activity_type: str,
        *,
        subagent_run_id: str | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        for name, value in (("message_id", message_id), ("activity_type", activity_type)):
            if not isinstance(value, str) or not value:
                raise TypeError(f"{name} must be a non-empty str, got {value!r}")
        if subagent_run_id is not None and not isinstance(subagent_run_id, str):
            raise TypeError(f"subagent_run_id must be a str or None, got {subagent_run_id!r}")
        self._message_id = message_id
        self._activity_type = activity_type
        self._subagent_run_id = subagent_run_id
        self._clock = clock or _wall_clock_ms
        self._content: dict[str, Any] | None = None

    @property
    def message_id(self) -> str:
        """The activity message every event names."""
        return self._message_id

    @property
    def activity_type(self) -> str:
        """The type the last event carried (or will carry first)."""
        return self._activity_type

    @property
    def content(self) -> dict[str, Any] | None:
        """A copy of the content consumers hold after the last event, None before the first."""
        return None if self._content is None else json.loads(json.dumps(self._content))

    def update(
        self,
        content: Mapping[str, Any],
        *,
        activity_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        now_ms: int | None = None,
    ) -> dict[str, Any] | None:
        """The event that brings consumers from the last content to `content`.

        The first call gives a snapshot; later calls a delta, or a snapshot when that is
        smaller. Returns None when content and type are unchanged and there is no metadata.
        """
        new = _json_copy(content, "content")
        new_type = self._check_type(activity_type)
        meta = None if metadata is None else _json_copy(metadata, "metadata")
        if self._content is None:
            return self._emit_snapshot(new, new_type, meta, now_ms)
        patch = diff(self._content, new)
        if not patch and new_type == self._activity_type and meta is None:
            return None
        if _size(patch) >= _size(new):
            return self._emit_snapshot(new, new_type, meta, now_ms)
        event = self._envelope("ACTIVITY_DELTA", new_type, meta, now_ms)
        event["patch"] = patch
        self._content, self._activity_type = new, new_type
        return event

    def snapshot(
        self, *, metadata: Mapping[str, Any] | None = None, now_ms: int | None = None
    ) -> dict[str, Any]:
        """A full snapshot of the current content, to resynchronise consumers."""
        if self._content is None:
            raise RuntimeError("no content yet: call update() first")
        meta = None if metadata is None else _json_copy(metadata, "metadata")
        return self._emit_snapshot(self._content, self._activity_type, meta, now_ms)

    def _check_type(self, activity_type: str | None) -> str:
        if activity_type is None:
            return self._activity_type
        if not isinstance(activity_type, str) or not activity_type:
            raise TypeError(f"activity_type must be a non-empty str, got {activity_type!r}")
        return activity_type

    def _now(self, now_ms: int | None) -> int:
        value = self._clock() if now_ms is None else now_ms
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"timestamps are integer milliseconds, got {value!r}")
        if abs(value) > _MAX_SAFE_INTEGER:
            raise ValueError(f"timestamp {value} is outside +-(2^53 - 1), the AG-UI bound")
        return value

    def _envelope(
        self, kind: str, activity_type: str, meta: dict[str, Any] | None, now_ms: int | None
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": kind,
            "timestamp": self._now(now_ms),
            "messageId": self._message_id,
            "activityType": activity_type,
        }
        if self._subagent_run_id is not None:
            event["subagentRunId"] = self._subagent_run_id
        if meta is not None:
            event["metadata"] = meta
        return event

    def _emit_snapshot(
        self,
        content: dict[str, Any],
        activity_type: str,
        meta: dict[str, Any] | None,
        now_ms: int | None,
    ) -> dict[str, Any]:
        event = self._envelope("ACTIVITY_SNAPSHOT", activity_type, meta, now_ms)
        event["content"] = json.loads(json.dumps(content))
        self._content, self._activity_type = content, activity_type
        return event


_EVENT_MODELS: dict[str, type[BaseEvent]] = {
    "ACTIVITY_SNAPSHOT": ActivitySnapshotEvent,
    "ACTIVITY_DELTA": ActivityDeltaEvent,
}


def to_model(event: Mapping[str, Any]) -> BaseEvent:
    """The `ag_ui.core` model of a publisher event (validated by the package's pydantic models)."""
    model = _EVENT_MODELS.get(str(event.get("type")))
    if model is None:
        raise ValueError(f"not a publisher event: type {event.get('type')!r}")
    return model.model_validate(dict(event))


def encode_sse(event: Mapping[str, Any] | BaseEvent) -> str:
    """One SSE frame (`data: ...` and a blank line), as `ag_ui.encoder.EventEncoder` writes it."""
    model = event if isinstance(event, BaseEvent) else to_model(event)
    return EventEncoder().encode(model)
