"""`python -m tether.protogen [OUT_DIR]`: generate the gRPC stubs from `proto/` (grpcio-tools).

The stubs are written into one generated package, `tether._gen` (by default
`python/tether/_gen/`), and never edited by hand: `tests/test_proto_drift.py` regenerates them
into a temp dir and fails on any difference. protoc names the modules after the proto's path
(`tether/robot/v1/...`), so their imports of each other are rewritten once to point into
`tether._gen` instead of at the `tether` package itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tether import _exit

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
DEFAULT_OUT = Path(__file__).resolve().parent / "_gen"
#: Every contract, relative to `proto/`.
PROTOS = ("tether/robot/v1/robot_control.proto",)
_IMPORT = re.compile(rb"^from tether\.(\S+) import ", re.MULTILINE)


def generate(out: Path) -> list[Path]:
    """Write the stubs of every contract under `out`; return the files written, sorted."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # a dev tool, imported here

    out.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        argv = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / proto),
        ]
        if protoc.main(argv) != 0:
            raise SystemExit(f"tether protogen: protoc failed on {proto}")
    written: list[Path] = []
    for path in sorted(out.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        data = _IMPORT.sub(rb"from tether._gen.tether.\1 import ", path.read_bytes())
        path.write_bytes(data)
        written.append(path)
    packages = {out}
    for path in written:
        packages.update(d for d in path.parents if d.is_relative_to(out))
    for package in packages:
        init = package / "__init__.py"
        if not init.exists():
            init.write_bytes(b"")
            written.append(init)
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    from tether._args import Parser

    parser = Parser(prog="python -m tether.protogen", description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=DEFAULT_OUT, help="the generated package's directory"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for path in generate(args.out):
        print(path)
    return _exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
