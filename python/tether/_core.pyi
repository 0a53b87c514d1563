"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

from collections.abc import Sequence
from typing import final

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

# --- agui (rust/src/bindings/agui.rs) ---

# --- catalog (rust/src/bindings/catalog.rs) ---

# --- codec (rust/src/bindings/codec.rs) ---

class DxlError(TetherError):
    """Root of DYNAMIXEL codec errors."""

class DxlUsageError(DxlError):
    """A DYNAMIXEL codec argument the caller can fix (bad id, empty read, oversize packet)."""

class DxlFrameError(DxlError):
    """Received bytes that are not a valid DYNAMIXEL frame or command (the peer's fault)."""

class DxlTransportError(DxlError):
    """The serial line failed: no answer in time, or the port cannot be used."""

class DxlTimeoutError(DxlTransportError):
    """No valid status packet arrived before the deadline (after any allowed read retries)."""

class DxlWriteUnconfirmed(DxlTransportError):
    """A write went out but its status never came back: it may or may not have been applied."""

class DxlPortBusy(DxlTransportError):
    """Another process owns this device (exclusive open or identity lock held)."""

class DxlDeviceError(DxlError):
    """A device answered with an error number in its status packet (see `.code`)."""

class DxlIdentityError(DxlError):
    """The device on the port is not the configured one (identity, model, id or status level)."""

class HostConfigError(TetherError):
    """The host configuration file is invalid (see `.code`)."""

class OperatorRejection(TetherError):
    """An operator decision was refused (credential, stale revision, changed device state)."""

def dxl_crc16(data: bytes) -> int:
    """CRC-16 (poly 0x8005) of `data`."""

def dxl_encode(id: int, instruction: int, params: bytes = ...) -> bytes:
    """Frame any instruction byte with raw parameters (stuffing, length and CRC applied)."""

def dxl_encode_status(id: int, error: int, params: bytes = ...) -> bytes:
    """Frame a status packet (what a device answers)."""

def dxl_ping(id: int) -> bytes: ...
def dxl_read(id: int, address: int, length: int) -> bytes: ...
def dxl_write(id: int, address: int, data: bytes) -> bytes: ...
def dxl_reg_write(id: int, address: int, data: bytes) -> bytes: ...
def dxl_action(id: int = ...) -> bytes: ...
def dxl_reboot(id: int) -> bytes: ...
def dxl_sync_read(address: int, length: int, ids: Sequence[int]) -> bytes: ...
def dxl_sync_write(address: int, length: int, entries: Sequence[tuple[int, bytes]]) -> bytes: ...

@final
class DxlPacket:
    """One decoded frame; status fields decode the error byte of a status packet."""

    @property
    def id(self) -> int: ...
    @property
    def instruction(self) -> int: ...
    @property
    def params(self) -> bytes: ...
    @property
    def is_status(self) -> bool: ...
    @property
    def error(self) -> int | None:
        """The raw error byte of a status packet, None for an instruction packet."""
    @property
    def alert(self) -> bool: ...
    @property
    def error_code(self) -> str | None:
        """Stable code of the error number ("none", "result_fail", ...), None for instructions."""
    @property
    def data(self) -> bytes: ...
    def command(self) -> DxlCommand:
        """Interpret an instruction packet as a typed command."""

@final
class DxlCommand:
    """A parsed instruction. Fields that do not apply to `name` are None / empty."""

    @property
    def name(self) -> str: ...
    @property
    def instruction(self) -> int: ...
    @property
    def address(self) -> int | None: ...
    @property
    def length(self) -> int | None: ...
    @property
    def data(self) -> bytes:
        """WRITE/REG_WRITE data, FACTORY_RESET option, or an uninterpreted instruction's params."""
    @property
    def ids(self) -> list[int]: ...
    @property
    def entries(self) -> list[tuple[int, bytes]]: ...

@final
class DxlDecoder:
    """Streaming decoder: `feed` bytes, `next_packet` until None. Single owner."""

    def __new__(cls, *, max_length: int = 4096) -> DxlDecoder: ...
    def feed(self, data: bytes) -> None: ...
    def next_packet(self) -> DxlPacket | None: ...
    def resync(self) -> None:
        """Abandon a partial frame (after a read timeout): skip one byte and scan again."""
    def clear(self) -> None: ...
    @property
    def buffered(self) -> int: ...
    @property
    def discarded(self) -> int: ...

def dxl_decode_frame(frame: bytes) -> DxlPacket:
    """Decode exactly one complete frame."""

def dxl_error_codes() -> list[str]:
    """Stable codes of codec errors (usage and frame)."""

def dxl_status_error_codes() -> list[str]:
    """Stable codes of status error numbers 0..=7."""

def dxl_instructions() -> list[tuple[str, int]]:
    """Instruction names and bytes."""
