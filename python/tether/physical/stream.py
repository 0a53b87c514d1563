"""The demo's live AG-UI stream; it moved to `tether.agui.stream` (re-exported here)."""

from tether.agui.stream import MessageState, RunStream, StoreState, StreamServer, sse_frame

encode_sse = sse_frame

__all__ = ["MessageState", "RunStream", "StoreState", "StreamServer", "encode_sse"]
