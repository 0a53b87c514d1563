"""tether.errors: one hierarchy rooted at TetherError, errors born in Python are Python classes
with fields, transport errors are protocol-neutral, and importing it stays cheap."""

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import tether
from tether import _core


def test_importing_patch_loads_no_runtime_world_or_storage_module() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import tether.patch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"tether.patch", "tether.errors", "tether._core"} <= modules
    heavy = ("runtime", "world", "storage", "activities", "families", "apps", "devices", "adapters")
    loaded = sorted(
        m
        for m in modules
        if m == "sqlite3" or (m.startswith("tether.") and m.split(".")[1] in heavy)
    )
    assert loaded == []


def test_runtime_and_world_errors_are_still_reexported_lazily() -> None:
    from tether.errors import LeaseLost, WorldError
    from tether.runtime._errors import LeaseLost as runtime_lease_lost
    from tether.world._errors import WorldError as world_error

    assert (LeaseLost, WorldError) == (runtime_lease_lost, world_error)
    assert issubclass(WorldError, tether.TetherError)
    with pytest.raises(AttributeError):
        tether.errors.NoSuchError  # noqa: B018 - the attribute access is the test


PYTHON_BORN = (
    "HostConfigError",
    "OperatorRejection",
    "TransportError",
    "TransportTimeout",
    "WriteUnconfirmed",
    "PortBusy",
    "PortLost",
    "DeviceError",
    "DeviceIdentityError",
)


@pytest.mark.parametrize("name", PYTHON_BORN)
def test_python_born_errors_are_python_classes_with_fields(name: str) -> None:
    cls = getattr(tether.errors, name)
    assert not hasattr(_core, name) and not cls.__module__.startswith("tether._core")
    assert issubclass(cls, tether.errors.CodedError) and issubclass(cls, tether.TetherError)
    err = cls("some_code", "what went wrong", details={"key": "sped"})
    assert (err.code, err.message, err.details) == ("some_code", "what went wrong", {"key": "sped"})
    assert str(err) == "some_code: what went wrong"
    again = pickle.loads(pickle.dumps(err))
    assert (type(again), again.code, again.details) == (cls, "some_code", {"key": "sped"})


def test_transport_errors_are_protocol_neutral() -> None:
    from tether import transport

    names = [name.lower() for name in transport.__all__]
    assert not any("dynamixel" in name or "dxl" in name for name in names)
    source = Path(transport.__file__).read_text()
    assert "tether.adapters" not in source  # generic code never imports a protocol package
