"""Protocol-neutral errors at the device edge: the transport (port, line, control channel) and
the device at its other end.

Every device driver raises these, whatever its wire protocol, so generic code (the host,
`tether stop`, the operator and the families) catches one family and never a protocol's own
classes. Each carries `code` (stable snake_case, listed by the raising driver), `message` and
`details` (see `tether._coded.CodedError`).

```
TransportError        the port or line failed: nothing is known about the device's reply
├── TransportTimeout  no valid answer before the deadline (reads were retried first)
├── WriteUnconfirmed  a write went out, its confirmation never came: it may have applied
├── PortBusy          another process owns the port (exclusive open or identity lock)
└── PortLost          the adapter went away under an open port (unplugged, hung up, EIO)
DeviceError           the device answered and refused (a status/exception code)
DeviceIdentityError   the device on the port is not the configured one
└── DeviceSetupError  it is, but set up so a move would not mean what the configuration says
```
"""

from __future__ import annotations

from tether._coded import CodedError


class TransportError(CodedError):
    """The port or the line failed: no answer, or the port cannot be used."""


class TransportTimeout(TransportError):
    """No valid answer arrived before the deadline (after any allowed read retries)."""


class WriteUnconfirmed(TransportError):
    """A write went out but its confirmation never came back: it may or may not have applied."""


class PortBusy(TransportError):
    """Another process owns this port (exclusive open or identity lock held)."""


class PortLost(TransportError):
    """The adapter went away under an open port (unplugged, hung up, I/O error)."""


class DeviceError(CodedError):
    """The device answered with an error in its reply; `code` names it (the write did not
    apply)."""


class DeviceIdentityError(CodedError):
    """The device on the port is not the configured one (identity, model, id or settings)."""


class DeviceSetupError(DeviceIdentityError):
    """The configured device, set up so that a move would not do what the configuration says
    (its operating mode, its motion profile, its own limits): moves are refused until it is
    set up again; a stop still goes to it."""


__all__ = [
    "DeviceError",
    "DeviceIdentityError",
    "DeviceSetupError",
    "PortBusy",
    "PortLost",
    "TransportError",
    "TransportTimeout",
    "WriteUnconfirmed",
]
