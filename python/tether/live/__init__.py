"""Live device output for agent GUIs: the live-event contract of seed 002, sans-I/O.

The pieces, all pure (time is a parameter, bytes are the caller's to move):

- `validate_live_event` checks one event against every rule of the seed's schema (with
  Tether's definitions of the variants it references) and the rules no schema can state;
  a refusal is `LiveEventInvalid` with ``code`` (see `SCHEMA_CODES`, `TETHER_ONLY_CODES`)
  and ``path`` (an RFC 6901 pointer).
- `LivePublisher` frames tool-output traces (a ``set``, then ``append_text`` at byte offsets,
  128 KiB UTF-8 chunks, a 1 MiB cap with a marker, contiguous appends coalesced) and events
  into transport frames ``{epoch, seq, deliveries}``; anything for a settled turn becomes a
  discontinuity.
- `LiveSubscriber` reads frames and reports a gap, duplicate, reorder or epoch change and
  whether the canonical state must be re-read; `LiveOverlay` is the optimistic view, marking
  an entry that needs reconciliation with its reason and reconciling with the canonical
  record.
- The mapping from Activities (`turn_id_for`, `message_id_for`, `session_record`, ...) is
  documented in `tether.live._mapping`.

A trace, end to end::

    >>> from tether.live import LiveOverlay, LivePublisher, LiveSubscriber
    >>> pub = LivePublisher("ws", "world-1", epoch=1)
    >>> pub.tool_output("toolcall:world-1/sim/a1", "receipt:world-1/r/3/v3", "moving…", now_ms=5)
    >>> pub.tool_output("toolcall:world-1/sim/a1", "receipt:world-1/r/3/v3", " done\\n", now_ms=6)
    >>> sub, view = LiveSubscriber(epoch=1, seq=0), LiveOverlay("ws", "world-1")
    >>> outcome = sub.handle_frame(pub.poll_frame())
    >>> view.apply_outcome(outcome), outcome.reread
    (['applied', 'applied'], False)
    >>> view.message("toolcall:world-1/sim/a1")["payload"]["output"]["text"]
    'moving… done\\n'
"""

from tether._core import (
    FrameOutcome,
    LiveDelivery,
    LiveEvent,
    LiveEventError,
    LiveEventInvalid,
    LiveOverlay,
    LivePublisher,
    LiveSubscriber,
    LiveUsageError,
    live_error_codes,
    live_fault_kinds,
    live_mark_reasons,
    live_schema_codes,
    live_tether_only_codes,
    validate_live_event,
)
from tether.live._client import LiveClient
from tether.live._feed import Canonical, LiveFeed, PublisherSource, new_epoch
from tether.live._mapping import (
    TOOL_CALL_KIND,
    TOOL_ROLE,
    agent_session_id_for,
    interaction_updates,
    interactions_for,
    message_id_for,
    parse_message_id,
    parse_turn_id,
    request_id_for,
    runtime_state,
    runtime_update,
    session_record,
    tool_call_delta,
    tool_call_message,
    tool_call_payload,
    tool_call_status,
    turn_for,
    turn_id_for,
    turn_update,
)
from tether.live._schema import (
    DEFINITIONS_FILE,
    EVENT_SCHEMA_FILE,
    FRAME_SCHEMA_FILE,
    definitions,
    definitions_uri,
    event_schema,
    frame_schema,
    schema_bytes,
    schema_registry,
)
from tether.live._trace import Fact, TraceLine, TraceLog, Wording, trace_lines

#: Rules the JSON Schema expresses: `jsonschema` must agree with Tether on each.
SCHEMA_CODES: frozenset[str] = frozenset(live_schema_codes())
#: Contract rules only Tether can enforce (the JSON text itself and the cross-field rules).
TETHER_ONLY_CODES: frozenset[str] = frozenset(live_tether_only_codes())

__all__ = [
    "DEFINITIONS_FILE",
    "EVENT_SCHEMA_FILE",
    "FRAME_SCHEMA_FILE",
    "SCHEMA_CODES",
    "TETHER_ONLY_CODES",
    "TOOL_CALL_KIND",
    "TOOL_ROLE",
    "Canonical",
    "Fact",
    "LiveClient",
    "LiveFeed",
    "PublisherSource",
    "TraceLine",
    "TraceLog",
    "Wording",
    "FrameOutcome",
    "LiveDelivery",
    "LiveEvent",
    "LiveEventError",
    "LiveEventInvalid",
    "LiveOverlay",
    "LivePublisher",
    "LiveSubscriber",
    "LiveUsageError",
    "agent_session_id_for",
    "definitions",
    "definitions_uri",
    "event_schema",
    "frame_schema",
    "interaction_updates",
    "interactions_for",
    "live_error_codes",
    "live_fault_kinds",
    "live_mark_reasons",
    "message_id_for",
    "new_epoch",
    "parse_message_id",
    "parse_turn_id",
    "request_id_for",
    "runtime_state",
    "runtime_update",
    "schema_bytes",
    "schema_registry",
    "session_record",
    "tool_call_delta",
    "tool_call_message",
    "tool_call_payload",
    "tool_call_status",
    "trace_lines",
    "turn_for",
    "turn_id_for",
    "turn_update",
    "validate_live_event",
]
