"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---


# --- agui ---


# --- catalog ---


# --- codec ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import DxlDeviceError as DxlDeviceError
from tether._core import DxlError as DxlError
from tether._core import DxlFrameError as DxlFrameError
from tether._core import DxlIdentityError as DxlIdentityError
from tether._core import DxlPortBusy as DxlPortBusy
from tether._core import DxlTimeoutError as DxlTimeoutError
from tether._core import DxlTransportError as DxlTransportError
from tether._core import DxlUsageError as DxlUsageError
from tether._core import DxlWriteUnconfirmed as DxlWriteUnconfirmed
from tether._core import HostConfigError as HostConfigError
from tether._core import OperatorRejection as OperatorRejection

__all__ = ["TetherError"]  # each section above extends this list: __all__ += [...]
