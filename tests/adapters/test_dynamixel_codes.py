"""Every error code the DYNAMIXEL adapter, host configuration and operator raise is listed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tether
from tether.adapters.dynamixel import config, driver
from tether.devices import config as devices_config
from tether.devices import control, credentials, ports
from tether.operator import decisions

ROOT = Path(tether.__file__).parent


def literals(node: ast.expr) -> set[str]:
    """String codes an argument expression can evaluate to (constants, `a if c else b`,
    `str(...)` and `getattr(x, name, default)` defaults)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return literals(node.body) | literals(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "str" and node.args:
            return literals(node.args[0])
        if node.func.id == "getattr" and len(node.args) == 3:
            return literals(node.args[2])
    return set()


@pytest.mark.parametrize(
    ("path", "function", "arg", "listed"),
    [
        ("adapters/dynamixel/config.py", "config_error", 0, config.ERROR_CODES),
        ("adapters/dynamixel/driver.py", "_coded", 1, driver.ERROR_CODES),
        ("devices/config.py", "config_error", 0, devices_config.ERROR_CODES),
        ("devices/credentials.py", "_error", 0, credentials.CODES),
        ("devices/ports.py", "PortBusy", 0, ports.CODES),
        ("devices/ports.py", "DeviceIdentityError", 0, ports.CODES),
        ("devices/ports.py", "TransportError", 0, ports.CODES),
        ("devices/control.py", "TransportError", 0, control.CODES),
        ("operator/decisions.py", "rejection", 0, decisions.REJECTION_CODES),
    ],
)
def test_literal_codes_are_listed(
    path: str, function: str, arg: int, listed: tuple[str, ...]
) -> None:
    tree = ast.parse((ROOT / path).read_text())
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == function:
            used |= literals(node.args[arg])
    assert used and used <= set(listed)
    assert len(set(listed)) == len(listed)
    assert all(c == c.lower() and c.replace("_", "").isalpha() for c in listed)


def test_unlisted_codes_are_a_programming_error() -> None:
    with pytest.raises(ValueError):
        config.config_error("made_up", "x")
    with pytest.raises(ValueError):
        decisions.rejection("made_up", "x")
