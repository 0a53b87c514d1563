"""`ObservationStager`: turns completed but unobserved results into staged observations.

Rules (seed sections 2 and 7):
- Staging reads the pending-observation set paged to exhaustion, so a long prefix cannot hide
  a result; it runs outside the world lock and is idempotent, so it is repeated after every
  restart until a tick commits the observation. A result staged already (the same key and
  result) is not staged again: staging is a pure function of the family, key and result.
- A result is staged only once its payload is durable and matches its digest; a missing or
  corrupt payload, or a family whose staging raises, leaves that result pending (logged) while
  the others are still staged.
- A staged observation is handed to a tick only while its record is still pending observation
  (the core's column) of the same result; otherwise it is dropped. Many staged observations of
  a world are checked against one paged read of its pending set (`SCAN_FROM`), a few by
  reading each record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from tether.activities import ABANDONED_MEDIA_TYPE, ActivityKey, ActivityRecord, ResultRef
from tether.runtime._artifacts import ArtifactStore
from tether.runtime._crash import crash_point
from tether.runtime._errors import ArtifactError, owned_by
from tether.runtime._family import (
    Family,
    Observation,
    StagedResult,
    families_by_kind,
    observation_for,
)
from tether.runtime._ports import ObservationCatalog, WorldIndex

log = logging.getLogger("tether.runtime.stager")

#: From this many staged observations of a world on, a tick checks them against one paged read
#: of the world's pending set instead of reading each record (under the world lock, where one
#: scan costs the committing thread far fewer waits than a read per observation).
SCAN_FROM = 16


class ObservationStager:
    """The staged observations of one process, keyed by Activity. Shareable across threads.

    Args:
        families: the registered families (each result is staged by the family of its kind).
        catalog: read one record; scan the results pending observation.
        artifacts: where result payloads are read back and digest-checked.
        ledger: which worlds exist (results of destroyed worlds are not staged).
        page_size: page size of the pending-observation scan (it pages to exhaustion).
    """

    def __init__(
        self,
        families: Sequence[Family],
        catalog: ObservationCatalog,
        artifacts: ArtifactStore,
        ledger: WorldIndex,
        *,
        page_size: int = 256,
        owner: str | None = None,
    ) -> None:
        self._by_kind = families_by_kind(families)
        #: On a world ledger shared by hosts, the host whose worlds' results are staged here
        #: (`owned_by`): another host's are its own to observe, never held in this memory.
        self.owner = owner
        self.catalog = catalog
        self.artifacts = artifacts
        self.ledger = ledger
        self.page_size = page_size
        self._staged: dict[ActivityKey, Observation] = {}
        self._staged_mutex = threading.Lock()

    def restage(self) -> int:
        """Stage every completed but unobserved result (pages the pending set to exhaustion).

        A result whose payload is missing or corrupt, or whose family's staging raises, is not
        staged (and is logged); the others still are. An operator's abandon decision records a
        failed result with no payload: it is staged with an empty payload and `result.failed`
        set.
        """
        count = 0
        worlds = {w for w in self.ledger.worlds() if owned_by(w, self.owner)}
        pending: list[ActivityRecord] = list(
            self.catalog.iter_pending_observation(page_size=self.page_size)
        )
        for rec in pending:
            if rec.key.world_id not in worlds or rec.result is None:
                continue
            family = self._by_kind.get(rec.key.kind)
            if family is None:
                continue
            with self._staged_mutex:
                held = self._staged.get(rec.key)
            if held is not None and held.result == rec.result:
                # Staged already, from this very result: staging is a pure function of the
                # family, the key and the result (its payload is content-addressed), so it
                # would be the same observation again.
                count += 1
                crash_point("after_staging")
                continue
            try:
                payload = self._payload(rec.result)  # durable before staging, digest-checked
            except ArtifactError:
                log.exception("result of %s is not durable; not staged", rec.key)
                continue
            try:
                obs = observation_for(family, StagedResult(rec.key, rec.result, payload))
            except Exception:
                # One family's staging bug must not stall every other observation: this
                # result stays pending (and is retried each pass); the rest are staged.
                log.exception("family %r failed to stage %s; not staged", family.name, rec.key)
                continue
            with self._staged_mutex:
                self._staged[rec.key] = obs
            count += 1
            crash_point("after_staging")
        return count

    def _payload(self, result: ResultRef) -> bytes:
        if result.failed and result.media_type == ABANDONED_MEDIA_TYPE:
            return b""  # an operator abandoned it: the reference names a decision, not bytes
        return self.artifacts.get(result)

    def staged(self) -> list[Observation]:
        """Every staged observation, in (world, kind, id) order."""
        with self._staged_mutex:
            staged = list(self._staged.values())
        staged.sort(key=lambda o: (o.key.world_id, o.key.kind, o.key.activity_id))
        return staged

    def staged_worlds(self) -> list[str]:
        """Worlds with staged observations waiting for a tick."""
        with self._staged_mutex:
            return sorted({k.world_id for k in self._staged})

    def observations_for(self, world_id: str, limit: int | None = None) -> list[Observation]:
        """The world's staged observations a tick may commit now, in (kind, id) order, at most
        `limit` of them (the others stay staged for a later tick).

        One whose record was settled meanwhile, or now holds another result, is dropped.
        """
        with self._staged_mutex:
            staged = [o for k, o in self._staged.items() if k.world_id == world_id]
        staged.sort(key=lambda o: (o.key.kind, o.key.activity_id))
        read: Callable[[ActivityKey], ActivityRecord | None] = self.catalog.get
        if len(staged) >= SCAN_FROM and (limit is None or limit >= SCAN_FROM):
            pending = {
                r.key: r
                for r in self.catalog.iter_pending_observation(
                    world_id=world_id, page_size=self.page_size
                )
            }
            read = pending.get
        live: list[Observation] = []
        for obs in staged:
            if limit is not None and len(live) >= limit:
                break
            rec = read(obs.key)
            if rec is not None and rec.pending_observation and rec.result == obs.result:
                live.append(obs)
            else:
                with self._staged_mutex:
                    self._staged.pop(obs.key, None)
        return live

    def committed(self, observations: Iterable[Observation]) -> None:
        """Forget observations a tick committed (a newer staging of the same key stays)."""
        with self._staged_mutex:
            for obs in observations:
                if self._staged.get(obs.key) is obs:
                    del self._staged[obs.key]
