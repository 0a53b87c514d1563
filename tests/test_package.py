"""The package imports and its native core answers."""

import tether
from tether import _core


def test_version_comes_from_the_rust_core() -> None:
    assert tether.__version__ == _core.__version__
    assert tether.__version__.count(".") == 2


def test_errors_share_one_root() -> None:
    assert issubclass(tether.TetherError, Exception)
    assert tether.errors.TetherError is _core.TetherError
