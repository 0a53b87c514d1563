"""The runtime's named crash-injection points (`TETHER_CRASH_AT`, the one mechanism in
`tether._crash` that the providers use too)."""

from __future__ import annotations

from typing import Final

from tether._crash import crash_point

#: Every injection point the runtime exposes, in protocol order.
CRASH_POINTS: Final = (
    "after_intent_tick",
    "after_refusal_document",
    "after_admission",
    "after_claim",
    "after_bind",
    "during_effect",
    "artifact_temp_written",
    "after_effect",
    "after_result",
    "after_staging",
    "after_observation_tick",
    "after_settlement",
)

__all__ = ["CRASH_POINTS", "crash_point"]
