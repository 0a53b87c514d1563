"""Typed errors raised by the Activity runtime: families, artifacts, attempts and the Host."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tether._coded import CodedError
from tether._core import TetherError
from tether.storage._errors import with_code

_T = TypeVar("_T")


class ActivityRuntimeError(TetherError):
    """Base of every error raised by `tether.runtime`. Each subclass a program meets has a
    stable `code` to branch on, as every Tether error does; this class's own (a call the
    runtime refuses: a bad argument, a second start) has none, as a `TypeError` has none."""


class WorldOfAnotherHost(CodedError, ActivityRuntimeError):
    """A world this Host may not write: on a world ledger shared by hosts, a Host writes and
    observes only the worlds named for its host (`<id>@<host>`, `owned_by`). Code
    ``world_of_another_host``; details: ``world``, ``host``."""


def owned_by(world_id: str, owner: str | None) -> bool:
    """Whether a Host whose worlds are `owner`'s (None: every world, a ledger of its own)
    writes `world_id`: on a shared ledger, the worlds named `<id>@<owner>`."""
    if owner is None:
        return True
    base, sep, host = world_id.rpartition("@")
    return bool(sep and base) and host == owner


def check_owned(world_id: str, owner: str | None) -> None:
    """Refuse (`WorldOfAnotherHost`) a world `owned_by` says this Host does not write."""
    if not owned_by(world_id, owner):
        raise WorldOfAnotherHost(
            "world_of_another_host",
            f"world {world_id!r} is not this host's: on a world ledger shared by hosts, host"
            f" {owner!r} writes only the worlds named <id>@{owner} (each world has one writer;"
            f" taking another host's would fence it)",
            details={"world": world_id, "host": owner},
        )


class FamilyError(ActivityRuntimeError):
    """A family is registered wrongly or broke its contract (bad request, staging or writes)."""

    code: str = "family_error"


def bad_families(message: str) -> FamilyError:
    """A families factory that cannot serve: a `FamilyError` with the code ``bad_families``
    (a configuration error, `tether._exit.USAGE`), from `tether serve` and `tether worker`."""
    return with_code(FamilyError(message), "bad_families")


def call_factory(where: str, call: Callable[[], _T]) -> _T:
    """``call()`` of a families factory named by ``where``: a failure of the factory's own
    (anything but a Tether error) is `bad_families` naming it, never an internal error."""
    try:
        return call()
    except TetherError:
        raise
    except Exception as exc:
        raise bad_families(f"{where} failed: {type(exc).__name__}: {exc}") from exc


class ProjectionConflict(FamilyError):
    """A projection replay for the same receipt asked for a different request (fails closed)."""

    code: str = "projection_conflict"


class ProviderIOForbidden(ActivityRuntimeError):
    """Provider work was attempted where it is forbidden (in a projection or under the lock)."""

    code: str = "provider_io_forbidden"


class LeaseLost(ActivityRuntimeError):
    """The attempt's lease or fence is no longer live; the worker must stop touching the record."""

    code: str = "lease_lost"


class ArtifactError(ActivityRuntimeError):
    """Base of artifact store errors."""

    code: str = "artifact_error"


class ArtifactMissing(ArtifactError):
    """No artifact is stored under the reference."""

    code: str = "artifact_missing"


class ArtifactCorrupt(ArtifactError):
    """The stored bytes do not match the reference's digest or size."""

    code: str = "artifact_corrupt"


class HostClosed(ActivityRuntimeError):
    """The Host was closed."""

    code: str = "host_closed"
