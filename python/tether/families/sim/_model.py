"""The MJCF models shipped with Tether, addressed by name and pinned by their SHA-256 digest."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import mujoco  # type: ignore[import-untyped]

from tether.families.sim.errors import ModelDigestMismatch, UnknownModel

_NAME = re.compile(r"^[a-z0-9_]{1,64}$")

#: The model the demo and benchmark use unless told otherwise.
DEFAULT_MODEL = "reach_arm_2link"


@dataclass(frozen=True)
class ModelFile:
    """One shipped MJCF file: its name, bytes and `sha256:` digest."""

    name: str
    xml: bytes
    digest: str

    def compile(self) -> mujoco.MjModel:
        """Compile the MJCF text into a fresh `MjModel`."""
        return mujoco.MjModel.from_xml_string(self.xml.decode("utf-8"))


def available_models() -> list[str]:
    """Names of the models shipped in the package, sorted."""
    root = resources.files("tether.families.sim").joinpath("models")
    return sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".xml"))


def load_model_file(name: str, *, digest: str | None = None) -> ModelFile:
    """Read a shipped model by name; if `digest` is given it must match the file's digest."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise UnknownModel(f"model name must match {_NAME.pattern}, got {name!r}")
    path = resources.files("tether.families.sim").joinpath("models").joinpath(f"{name}.xml")
    if not path.is_file():
        raise UnknownModel(f"no shipped model {name!r}; available: {available_models()}")
    xml = path.read_bytes()
    actual = "sha256:" + hashlib.sha256(xml).hexdigest()
    if digest is not None and digest != actual:
        raise ModelDigestMismatch(f"model {name!r} has digest {actual}, the request pins {digest}")
    return ModelFile(name=name, xml=xml, digest=actual)
