"""The seed's schema is in the package byte for byte, and every reference it makes resolves
to Tether's definitions through the `referencing` registry."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from referencing.jsonschema import DRAFT202012
from tether.live import (
    DEFINITIONS_FILE,
    EVENT_SCHEMA_FILE,
    FRAME_SCHEMA_FILE,
    definitions,
    definitions_uri,
    event_schema,
    frame_schema,
    schema_bytes,
    schema_registry,
)

SEED = "002_eb2ec23e76437f04.txt"


def _seed_path() -> Path | None:
    repo = Path(__file__).resolve().parents[2]
    for shared in (Path("/work/shared"), repo.parent / "shared", repo / "shared"):
        p = shared / "seeds" / SEED
        if p.exists():
            return p
    return None


def test_the_schema_file_is_the_seed_byte_for_byte() -> None:
    seed = _seed_path()
    if seed is None:
        pytest.skip("the seeds (shared/) are not beside this checkout")
    text = seed.read_bytes()
    first_line, _, _ = text.partition(b"\n")
    assert first_line.endswith(b"agent-activity-live-event.schema.json")
    document = text[text.index(b"{") :]
    assert schema_bytes(EVENT_SCHEMA_FILE) == document


def test_every_schema_is_a_valid_draft_2020_12_schema() -> None:
    for schema in (event_schema(), definitions(), frame_schema()):
        jsonschema.Draft202012Validator.check_schema(schema)


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        here = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return here + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_reference_of_the_seed_resolves_to_a_schema() -> None:
    schema = event_schema()
    resolver = schema_registry().resolver(base_uri=schema["$id"])
    external = [r for r in _refs(schema) if not r.startswith("#")]
    assert len(external) == 5
    for ref in external:
        resolved = resolver.lookup(ref).contents
        assert isinstance(resolved, dict) and resolved, ref
        DRAFT202012.create_resource(resolved)
    positions = {r.split("#")[1] for r in external}
    assert positions == {
        "/payloadSchema/oneOf/0",
        "/payloadSchema/oneOf/6",
        "/payloadSchema/oneOf/7",
        "/payloadSchema/oneOf/8",
        "/payloadSchema/oneOf/8/properties/data/properties/interaction",
    }
    titles = [
        resolver.lookup(f"{definitions_uri()}#/payloadSchema/oneOf/{i}").contents["title"]
        for i in (0, 6, 7, 8)
    ]
    assert titles == [
        "runtime_activity_update",
        "session_audit",
        "turn_update",
        "interaction_update",
    ]


def test_schema_files_are_package_data() -> None:
    for name in (EVENT_SCHEMA_FILE, DEFINITIONS_FILE, FRAME_SCHEMA_FILE):
        assert json.loads(schema_bytes(name))
    with pytest.raises(ValueError):
        schema_bytes("../pyproject.toml")
