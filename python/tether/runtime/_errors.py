"""Typed errors raised by the Activity runtime: families, artifacts, attempts and the Host."""

from __future__ import annotations

from tether._core import TetherError


class ActivityRuntimeError(TetherError):
    """Base of every error raised by `tether.runtime`."""


class FamilyError(ActivityRuntimeError):
    """A family is registered wrongly or broke its contract (bad request, staging or writes)."""


class ProjectionConflict(FamilyError):
    """A projection replay for the same receipt asked for a different request (fails closed)."""


class ProviderIOForbidden(ActivityRuntimeError):
    """Provider work was attempted where it is forbidden (in a projection or under the lock)."""


class LeaseLost(ActivityRuntimeError):
    """The attempt's lease or fence is no longer live; the worker must stop touching the record."""


class ArtifactError(ActivityRuntimeError):
    """Base of artifact store errors."""


class ArtifactMissing(ArtifactError):
    """No artifact is stored under the reference."""


class ArtifactCorrupt(ArtifactError):
    """The stored bytes do not match the reference's digest or size."""


class HostClosed(ActivityRuntimeError):
    """The Host was closed."""
