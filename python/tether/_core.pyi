"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

# --- agui (rust/src/bindings/agui.rs) ---

# --- catalog (rust/src/bindings/catalog.rs) ---

# --- codec (rust/src/bindings/codec.rs) ---
