"""The package imports and its native core answers."""

import tether
from tether import _core


def test_version_comes_from_the_rust_core() -> None:
    assert tether.__version__ == _core.__version__
    assert tether.__version__.count(".") == 2


def test_errors_share_one_root() -> None:
    assert issubclass(tether.TetherError, Exception)
    assert tether.errors.TetherError is _core.TetherError


def test_every_core_exception_is_reexported_by_tether_errors() -> None:
    core_errors = {
        name
        for name, value in vars(_core).items()
        if isinstance(value, type) and issubclass(value, tether.TetherError)
    }
    assert len(core_errors) > 20
    missing = sorted(name for name in core_errors if getattr(tether.errors, name, None) is None)
    assert missing == []
