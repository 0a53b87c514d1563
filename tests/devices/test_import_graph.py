"""Nothing generic imports a protocol package: the import graph of the generic packages, walked
from their source (every `import`, module level or inside a function), reaches no
`tether.adapters.*` or `tether.emulators.*` module. Device types and family reviews are found by
dotted path at run time (`tether.devices.registry`, `tether.operator.cli.REVIEWS`)."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

ROOT = Path(tether.__file__).parent
GENERIC = (
    "devices",
    "operator",
    "runtime",
    "storage",
    "world",
    "activities",
    "families/sim",
    "serve",
    "console",
    "live",
)
PROTOCOL = ("tether.adapters", "tether.emulators")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def file_of(module: str) -> Path | None:
    base = ROOT.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def imports(path: Path) -> set[str]:
    """Every tether module `path` imports (absolute or relative, at any depth)."""
    found: set[str] = set()
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if file_of(f"{base}.{a.name}")}
    return {m for m in found if m == "tether" or m.startswith("tether.")}


def closure(start: list[Path]) -> dict[str, list[str]]:
    """module -> the import chain that reached it, from the generic packages."""
    seen: dict[str, list[str]] = {}
    todo = [(module_of(p), [module_of(p)]) for p in start]
    while todo:
        module, chain = todo.pop()
        if module in seen:
            continue
        seen[module] = chain
        path = file_of(module)
        if path is None:
            continue
        for name in imports(path):
            parts = name.split(".")
            for i in range(2, len(parts) + 1):  # importing a.b.c imports a.b first
                todo.append((".".join(parts[:i]), [*chain, ".".join(parts[:i])]))
    return seen


def generic_files() -> list[Path]:
    return [p for package in GENERIC for p in sorted((ROOT / package).rglob("*.py"))]


def test_no_generic_package_reaches_a_protocol_package() -> None:
    files = generic_files()
    assert len(files) > 40  # the walk really covers the packages
    reached = closure(files)
    assert "tether.devices.host" in reached and "tether.transport" in reached
    bad = {m: " -> ".join(c) for m, c in reached.items() if m.startswith(PROTOCOL)}
    assert bad == {}


def test_the_walk_finds_a_protocol_import_where_there_is_one() -> None:
    # The same walk from the robot-move family (a protocol's consumer) does reach DYNAMIXEL.
    reached = closure(sorted((ROOT / "families" / "robot_move").rglob("*.py")))
    assert any(m.startswith("tether.adapters.dynamixel") for m in reached)


def test_device_types_are_registered_by_dotted_path() -> None:
    from tether.devices.registry import DEVICE_TYPES, device_type

    assert DEVICE_TYPES["dynamixel"] == "tether.adapters.dynamixel.config:DEVICE_TYPE"
    assert device_type("dynamixel").name == "dynamixel"
