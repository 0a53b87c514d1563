"""AG-UI activity messages: the Rust-backed consumer store and the producer-side publisher."""

from tether._core import (
    ActivityStore,
    AguiWarning,
    agui_error_codes,
    agui_warning_codes,
)
from tether.agui._publisher import ActivityPublisher, encode_sse, to_model

__all__ = [
    "ActivityPublisher",
    "ActivityStore",
    "AguiWarning",
    "agui_error_codes",
    "agui_warning_codes",
    "encode_sse",
    "to_model",
]
