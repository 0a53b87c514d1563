"""Live AG-UI activity messages: one message per durable Activity, published on a run stream.

Each Activity (an `ActivityKey`) gets one activity message whose `messageId` is the key's
control path `world/kind/id` and whose `activityType` is the kind. Reports merge into the
message's content and only the difference is published (an `ActivityPublisher` per key: the
first event is a snapshot, later ones deltas). A settled Activity gets its final content as a
snapshot and ignores later reports. Thread-safe: worker threads' progress and a watcher may
report at once; events reach the stream in the order the content changed.

Retention (memory stays bounded over a long run): every unsettled Activity is held, and the
`retain_settled` most recently settled ones. Settling one more forgets the oldest settled
Activity: its content and publisher go, and the stream leaves its message out of later
snapshots (`RunStream.forget`; a subscriber holding it keeps it until a resync). The keys of the
last `remember_settled` forgotten Activities are still known as settled, so a straggling report
for one is ignored; a report for an Activity forgotten longer ago than that starts a new message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.activities import ActivityKey
from tether.agui._publisher import ActivityPublisher

if TYPE_CHECKING:  # tether.runtime may come to import tether.agui; keep the edge type-only
    from tether.agui.stream import RunStream
    from tether.runtime import ProgressEvent

__all__ = ["LiveActivities", "message_id"]


def message_id(key: ActivityKey) -> str:
    """The AG-UI messageId of an activity: its control key, world/kind/id."""
    return f"{key.world_id}/{key.kind}/{key.activity_id}"


class LiveActivities:
    """Publishes each Activity's live content on `stream` as AG-UI activity events.

    Args:
        stream: the started run stream that receives the events.
        retain_settled: how many settled Activities keep their message (module docstring).
        remember_settled: how many forgotten settled keys still ignore straggling reports.
    """

    def __init__(
        self, stream: RunStream, *, retain_settled: int = 256, remember_settled: int = 4096
    ) -> None:
        for name, value in (
            ("retain_settled", retain_settled),
            ("remember_settled", remember_settled),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.stream = stream
        self._retain = retain_settled
        self._remember = remember_settled
        self._lock = threading.Lock()
        self._pubs: dict[ActivityKey, ActivityPublisher] = {}
        self._content: dict[ActivityKey, dict[str, Any]] = {}
        # Settled keys, oldest settlement first: those held, then those only remembered.
        self._settled: OrderedDict[ActivityKey, None] = OrderedDict()
        self._forgotten: OrderedDict[ActivityKey, None] = OrderedDict()

    def _publisher(self, key: ActivityKey) -> ActivityPublisher:
        pub = self._pubs.get(key)
        if pub is None:
            pub = self._pubs[key] = ActivityPublisher(message_id(key), key.kind)
        return pub

    def keys(self) -> list[ActivityKey]:
        """The Activities reported so far, in first-report order."""
        with self._lock:
            return list(self._content)

    def content(self, key: ActivityKey) -> dict[str, Any] | None:
        """A copy of the activity's content as last published (None if never reported)."""
        with self._lock:
            pub = self._pubs.get(key)
            return None if pub is None else pub.content

    def update(self, key: ActivityKey, /, **changes: Any) -> None:
        """Merge `changes` into the activity's live content and publish the difference.

        Raises:
            ValueError, TypeError: the merged content is not a JSON object (nothing published).
        """
        self.merge(key, changes)

    def reset(self, key: ActivityKey, /, **content: Any) -> None:
        """Replace the activity's live content (for example when a new attempt starts, so
        nothing of the last attempt lingers) and publish the difference."""
        self.merge(key, content, replace=True)

    def merge(self, key: ActivityKey, changes: Mapping[str, Any], *, replace: bool = False) -> None:
        """`update` with the changes as a mapping (any string keys); `replace` starts over
        from the base content (activity and world) instead of the last content."""
        with self._lock:
            if key in self._settled or key in self._forgotten:
                return
            base = {"activity": key.activity_id, "world": key.world_id}
            content = dict(base if replace else self._content.get(key) or base)
            content.update(changes)
            event = self._publisher(key).update(content)  # raises before anything is kept
            self._content[key] = content
            if event is not None:
                self.stream.publish(event)

    def progress(self, event: ProgressEvent) -> None:
        """Publish one adapter progress report: its content, attempt and state "running"."""
        self.merge(event.key, {"state": "running", "attempt": event.attempt} | event.content)

    def conclude(self, key: ActivityKey, changes: Mapping[str, Any]) -> None:
        """`settle` with the last content published for `key` and ``changes`` over it (the
        attempt's result stays shown as the Activity settles)."""
        with self._lock:
            base = {"activity": key.activity_id, "world": key.world_id}
            content = dict(self._content.get(key) or base)
        content.update(changes)
        self.settle(key, content)

    def settle(self, key: ActivityKey, content: Mapping[str, Any]) -> None:
        """Publish the final content of a settled activity as a snapshot; later reports are
        ignored."""
        with self._lock:
            if key in self._forgotten:
                return
            pub = self._publisher(key)
            pub.update(content)  # the snapshot below carries it, replacing any content
            self._content[key] = dict(content)
            self._settled[key] = None
            self._settled.move_to_end(key)
            self.stream.publish(pub.snapshot())
            while len(self._settled) > self._retain:
                old, _ = self._settled.popitem(last=False)
                del self._pubs[old], self._content[old]
                self.stream.forget(message_id(old))
                self._forgotten[old] = None
                while len(self._forgotten) > self._remember:
                    self._forgotten.popitem(last=False)
