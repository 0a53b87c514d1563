"""The package imports, its native core answers, and a built wheel works on its own."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

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


def test_tether_replay_works_from_an_installed_wheel(tmp_path: Path) -> None:
    """Build the wheel, install it into a fresh venv, run `tether replay` there (no checkout)."""
    root = Path(__file__).resolve().parents[1]
    maturin = Path(sys.executable).with_name("maturin")
    # The same interpreter and venv as `make build`, so cargo reuses its release build.
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix, "PYO3_PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)
    dist = tmp_path / "dist"
    subprocess.run(
        [str(maturin), "build", "--release", "--quiet", "-o", str(dist)],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("tether-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "tether/agui/activity_stream.sse" in zf.namelist()
    venv = tmp_path / "venv"
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    clean = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYO3_PYTHON")}
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", str(wheel)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / "elsewhere"  # no source tree on the path
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=work, env=clean, capture_output=True, text=True, check=False, timeout=120
        )

    where = run(str(py), "-c", "import tether; print(tether.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(venv), where
    done = run(str(venv / "bin" / "tether"), "replay")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replayed 62 events from activity_stream.sse")
    assert "activity act-plan [robot_plan]" in done.stdout
    as_json = run(str(venv / "bin" / "tether"), "replay", "--json")
    assert as_json.returncode == 0, as_json.stderr
    from tether.agui import replay as replay_mod

    here = replay_mod.replay((root / "python/tether/agui/activity_stream.sse").read_bytes())
    assert json.loads(as_json.stdout) == here.activities()
