"""The live-event JSON Schemas shipped with Tether and a `referencing` registry that resolves them.

`agent-activity-live-event.schema.json` is seed 002's schema byte for byte. Its variants
`$ref` ``../../../../events/protocol/definitions/agent/activity.updated.event.json#/...``
relative to its ``$id``; `activity.updated.event.json` is Tether's definition of those
variants, and `schema_registry()` maps the resolved reference to it. `live-frame.schema.json`
is Tether's transport frame. The registry needs the ``referencing`` package (installed with
``jsonschema``, a development dependency); nothing else here does.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

if TYPE_CHECKING:
    from referencing import Registry

EVENT_SCHEMA_FILE = "agent-activity-live-event.schema.json"
DEFINITIONS_FILE = "activity.updated.event.json"
FRAME_SCHEMA_FILE = "live-frame.schema.json"


def schema_bytes(name: str) -> bytes:
    """The exact bytes of one shipped schema file."""
    if name not in (EVENT_SCHEMA_FILE, DEFINITIONS_FILE, FRAME_SCHEMA_FILE):
        raise ValueError(f"no live schema named {name!r}")
    return resources.files("tether.live").joinpath("schema", name).read_bytes()


def event_schema() -> dict[str, Any]:
    """The seed's `AgentActivityLiveEvent` schema."""
    schema: dict[str, Any] = json.loads(schema_bytes(EVENT_SCHEMA_FILE))
    return schema


def definitions() -> dict[str, Any]:
    """Tether's definitions of the variants the event schema references."""
    defs: dict[str, Any] = json.loads(schema_bytes(DEFINITIONS_FILE))
    return defs


def frame_schema() -> dict[str, Any]:
    """The transport frame schema."""
    schema: dict[str, Any] = json.loads(schema_bytes(FRAME_SCHEMA_FILE))
    return schema


def definitions_uri() -> str:
    """The absolute URI the event schema's relative references resolve to (from the seed)."""
    schema = event_schema()
    ref: str = schema["$defs"]["runtimeActivityUpdate"]["$ref"]
    base: str = schema["$id"]
    return urljoin(base, ref.split("#", 1)[0])


def schema_registry() -> Registry[Any]:
    """A draft 2020-12 registry holding the event schema, the definitions and the frame schema."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    event = event_schema()
    frame = frame_schema()
    return Registry().with_resources(
        [
            (event["$id"], Resource.from_contents(event, default_specification=DRAFT202012)),
            (definitions_uri(), DRAFT202012.create_resource(definitions())),
            (frame["$id"], Resource.from_contents(frame, default_specification=DRAFT202012)),
        ]
    )
