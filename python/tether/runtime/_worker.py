"""Activity workers: claim fenced attempts outside the world lock and drive family adapters.

Rules kept here (seed section 2):
- Claims never happen under a world lock; the worker holds no world state at all.
- On an execution-authorised attempt the provider operation id is bound in the catalog under
  the live fence before the adapter's `execute` runs; a bound id that differs fails closed.
- A reconcile-only attempt calls `reconcile`, never `execute`, and records exactly its
  conclusion under the live fence: Recovered -> result, ConfirmedAbsent -> retry guard,
  Unknown -> evidence and a retry delay.
- The lease is renewed by a heartbeat thread; once a renewal is rejected the attempt is lost
  and the worker records nothing more.
- An attempt is released on shutdown only while it is still unbound (no provider work began).
- If `execute` raises or returns a result that is not durable, nothing is recorded: the
  lease runs out and the next attempt reconciles (an execute attempt cannot conclude unknown).
  A typed error (`CodedError`: a stopped robot, a device fault, a remote that did not answer)
  shortens the lease to `typed_end_lease_ms` of the attempt's number (5 s, doubling up to the
  lease): the reconcile comes soon, and an execute that keeps failing before any effect (each
  reconcile proving it absent) is not retried faster than that backoff.
- A commit whose reply was lost (`CommitUnknown`, PostgreSQL) is re-read before anything
  else: a claim or a bind that did not land starts no effect; a result that did not land is
  recorded again once; a reconcile conclusion (absence, unknown) is re-read and logged, and
  one that did not land is reconciled again by the next claim. A lost renewal is retried by
  the next heartbeat (a renewal that never landed lets the lease run out: the attempt is lost,
  never extended by a guess).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from tether._coded import CodedError
from tether.activities import (
    MAX_RETRY_AFTER_MS,
    ActivityKey,
    ActivityRecord,
    Catalog,
    Claim,
    Evidence,
    ResultRef,
    RetryGuard,
    operation_id_for,
)
from tether.errors import CatalogRejection, CatalogStorageError, TetherError
from tether.runtime._artifacts import ArtifactStore
from tether.runtime._crash import crash_point
from tether.runtime._errors import FamilyError, LeaseLost
from tether.runtime._failing import Failing
from tether.runtime._family import (
    AttemptContext,
    ConfirmedAbsent,
    Family,
    ProgressEvent,
    Recovered,
    Unknown,
    families_by_kind,
)
from tether.runtime._wakeup import CLAIMABLE, Wakeup
from tether.storage import CommitUnknown

log = logging.getLogger("tether.runtime.worker")

#: Retry delay recorded when an adapter raises instead of concluding.
ADAPTER_ERROR_RETRY_MS = 1000
#: At most this many Activities claimed by one `run_batch` transaction.
CLAIM_BATCH = 64


#: The shortest lease left to an execute attempt its adapter ended with a typed error: its
#: first attempt's; each later attempt doubles it, up to the worker's lease (`_give_up`).
#: Not less: a stop that parks many moves would have all their reconciles (each a read-back
#: on the bus) compete with the stops and the work right after it (with 1 s, the 500/s
#: Execute flood of `benches/grpc_control.py` fell from about 490/s to 410-466/s).
TYPED_END_LEASE_MS = 5_000


def typed_end_lease_ms(number: int, lease_ms: int) -> int:
    """The lease left to attempt ``number`` (1, 2, ...) after a typed error ended its execute:
    `TYPED_END_LEASE_MS` doubled per earlier attempt, never more than ``lease_ms``."""
    doublings = min(max(number, 1) - 1, 20)
    return max(1, min(lease_ms, TYPED_END_LEASE_MS << doublings))


class Worker:
    """One worker loop. Single owner: the thread that calls `run_once`/`run`.

    Args:
        open_catalog: opens a fresh catalog connection (one for the loop, one for heartbeats).
        artifacts: the data directory's artifact store.
        families: the families whose kinds this worker claims.
        owner: the claim owner name (unique per worker).
        lease_ms: lease length (1 ms to 7 days, `MAX_LEASE_MS`); the heartbeat renews it
            every third of that.
        emit: receives adapters' progress events (exceptions from it are logged, not raised).
        stop: set to finish; an unbound attempt claimed after it is set is released.
        host: the host this worker runs on: it claims Activities bound to this host's devices
            and unbound ones (None: unbound ones only).
        pause: called before each claim and before each attempt of a shared batch; it may
            block (the daemon's `StopFirst.wait_clear`: while a stop runs, background work
            waits, so the stop does not share the interpreter with it). None: never waits.
    """

    def __init__(
        self,
        *,
        open_catalog: Callable[[], Catalog],
        artifacts: ArtifactStore,
        families: Sequence[Family],
        owner: str,
        lease_ms: int = 30_000,
        emit: Callable[[ProgressEvent], None] | None = None,
        stop: threading.Event | None = None,
        host: str | None = None,
        pause: Callable[[], None] | None = None,
    ) -> None:
        self._open_catalog = open_catalog
        self.host = host
        self._pause = pause or _no_pause
        self.catalog = open_catalog()
        self.artifacts = artifacts
        self.owner = owner
        self.lease_ms = lease_ms
        self._emit = emit
        self.stop = stop or threading.Event()
        self._by_kind = families_by_kind(families)
        self.kinds = sorted(self._by_kind)
        self._heartbeat = _Heartbeat(open_catalog, lease_ms, f"heartbeat-{owner}")

    def close(self) -> None:
        """Stop the heartbeat thread and close the worker's catalog connections."""
        self._heartbeat.close()
        self.catalog.close()

    def run(self, *, wakeup: Wakeup | None = None) -> None:
        """Claim and run attempts until `stop` is set, waiting on `wakeup` while idle.

        Idle, the worker sleeps until an Activity of its kinds becomes claimable: a ring on
        the catalog's doorbell, or the earliest claimable time the core computed (a lease
        running out, a backoff ending), whichever comes first; never a fixed poll. Without
        `wakeup`, it waits on its own over the catalog's doorbell (default fallback poll).
        """
        own = wakeup is None
        wakeup = wakeup or Wakeup(self.stop, doorbell=self.catalog.doorbell, topic=CLAIMABLE)
        failing = Failing(log, f"worker {self.owner}", "attempt")
        try:
            while not self.stop.is_set():
                self._pause()
                mark = wakeup.mark()  # before the claim: a ring after it is never lost
                try:
                    if self.run_batch():
                        failing.over()
                        continue
                    delay_s = self.idle_delay_s()
                    failing.over()
                except Exception as exc:  # a worker loop must outlive one bad attempt
                    failing.failed(exc)
                    delay_s = None  # the fallback poll: never spin on a repeating failure
                wakeup.wait(mark, delay_s=delay_s)
        finally:
            if own:
                wakeup.close()

    def idle_delay_s(self) -> float | None:
        """Seconds until an Activity of this worker's kinds becomes claimable (0: now), on the
        lease clock; None if none will without another commit (which rings the doorbell)."""
        ms = self.catalog.claimable_in_ms(kinds=self.kinds, host=self.host)
        return None if ms is None else ms / 1000

    def run_once(self) -> bool:
        """Claim one attempt and run it to its recorded conclusion; False if nothing was ready."""
        return self.run_next() is not None

    def run_batch(self, limit: int = CLAIM_BATCH) -> bool:
        """Claim and run attempts to their recorded conclusions, sharing catalog transactions
        among attempts that will never start; False if nothing was ready.

        One attempt is claimed as `run_once` claims it. If its adapter's `never_starts` says
        it will end without starting (from the request alone: a move past its
        `not_after_ms`), up to `limit - 1` more such attempts are claimed in one transaction
        (any other attempt is left claimable for every worker), and all of them share one
        bind transaction, then each attempt's own `execute` (the family decides and records
        its terminal result per attempt, as it would alone), then one transaction recording
        all their results. Otherwise the attempt runs alone, as `run_once` runs it."""
        try:
            first = self.catalog.claim(self.owner, self.lease_ms, kinds=self.kinds, host=self.host)
        except CommitUnknown as e:
            first = self._claim_after_unknown(e)
        if first is None:
            return False
        request = self._never_starts(first.record) if limit > 1 else None
        if request is None:
            crash_point("after_claim")
            self._run(first)
            return True
        quick = [(first, request)]
        requests: dict[ActivityKey, dict[str, Any]] = {}

        def take(record: ActivityRecord) -> bool:
            found = self._never_starts(record)
            if found is not None:
                requests[record.key] = found
            return found is not None

        try:
            more = self.catalog.claim_many(
                self.owner, self.lease_ms, limit - 1, kinds=self.kinds, host=self.host, take=take
            )
        except CommitUnknown:
            # The batch named no key: what it claimed (if it landed) is left to its leases.
            log.warning("worker %s: a batch claim's reply was lost; leases run out", self.owner)
            more = []
        quick += [(c, requests[c.record.key]) for c in more]
        crash_point("after_claim")
        self._run_quick(quick)
        return True

    def _never_starts(self, record: ActivityRecord) -> dict[str, Any] | None:
        """The request of an unbound execute attempt its adapter says will never start, else
        None (the adapter's `execute` still decides)."""
        attempt = record.attempt
        if attempt is None or not attempt.may_execute or record.operation_id is not None:
            return None
        if self.stop.is_set():
            return None
        check = getattr(self._by_kind[record.key.kind].adapter, "never_starts", None)
        if check is None:
            return None
        try:
            request = self._request(record)
        except Exception:  # unreadable input: the attempt's own path reports it
            return None
        return request if check(request) else None

    def _run_quick(self, items: list[tuple[Claim, dict[str, Any]]]) -> None:
        """Bind all (one transaction), run each attempt's `execute`, record all results (one
        transaction); see `run_batch`."""
        catalog = self.catalog
        try:
            bound = catalog.bind_many([(c.record.key, c.attempt.fence) for c, _ in items])
        except CommitUnknown:
            # Bound or not, none executed: each lease runs out and its next claim starts over
            # (a bound one reconciles first).
            log.warning("worker %s: a batch bind's reply was lost; not executing", self.owner)
            return
        crash_point("after_bind")
        results: list[tuple[ActivityKey, int, ResultRef]] = []
        for (claim, request), done in zip(items, bound, strict=True):
            key = claim.record.key
            if isinstance(done, CatalogRejection):
                log.warning("worker %s lost %s: %s", self.owner, key, done)
                continue
            self._pause()
            result = self._execute_bound(claim, request)
            if result is not None:
                results.append((key, claim.attempt.fence, result))
        if not results:
            return
        crash_point("after_effect")
        try:
            recorded = catalog.record_results(results)
        except CommitUnknown:
            for key, fence, result in results:  # re-read each; record once what did not land
                record = catalog.get(key)
                if record is None or record.result is None:
                    try:
                        catalog.record_result(key, fence, result)
                    except (CatalogRejection, CommitUnknown) as e:
                        log.warning("worker %s: result of %s: %s", self.owner, key, e)
            recorded = []
        for (key, _, _), out in zip(results, recorded, strict=False):
            if isinstance(out, CatalogRejection):
                log.warning("worker %s lost %s: %s", self.owner, key, out)
        crash_point("after_result")

    def _execute_bound(self, claim: Claim, request: dict[str, Any]) -> ResultRef | None:
        """`execute` of a bound attempt under its heartbeat; its durable result, or None (the
        attempt is left to its lease, as `_execute` leaves it)."""
        record, attempt = claim.record, claim.attempt
        key, fence = record.key, attempt.fence
        family = self._by_kind[key.kind]
        beat = _Beat(self._heartbeat, key, fence)
        ctx = self._context(claim, beat)  # an execute attempt (`_never_starts` took only those)
        self._heartbeat.begin(beat, ctx)
        ended = False
        try:
            result = family.adapter.execute(ctx, request)
            if not isinstance(result, ResultRef) or not self.artifacts.is_durable(result):
                log.error("worker %s: %s returned a non-durable %r", self.owner, key, result)
                return None
            self._check_live(ctx)
            return result
        except (LeaseLost, CatalogRejection) as e:
            log.warning("worker %s lost %s (fence %d): %s", self.owner, key, fence, e)
            return None
        except Exception as e:  # as `_execute`: its line, and a typed end shortens the lease
            ended = self._execute_ended(key, e)
            return None
        finally:
            self._heartbeat.end(beat)
            if ended:
                self._give_up(key, fence, attempt.number)

    def _context(self, claim: Claim, beat: _Beat) -> AttemptContext:
        """The context an adapter sees for `claim`'s attempt, renewed through `beat`."""
        key, attempt = claim.record.key, claim.attempt
        return AttemptContext(
            key=key,
            operation_id=operation_id_for(key),
            fence=attempt.fence,
            attempt=attempt.number,
            may_execute=attempt.may_execute,
            artifacts=self.artifacts,
            renew=beat.renew_now,
            emit=self._emit_safely,
            stopping=self.stop,
            evidence=(
                claim.record.evidence.evidence
                if claim.record.awaiting_decision and claim.record.evidence is not None
                else None
            ),
        )

    def run_next(self, *, world_id: str | None = None) -> ActivityKey | None:
        """Claim one attempt (of `world_id` only, if given) and run it to its recorded
        conclusion; return its key, or None if nothing was claimable."""
        try:
            claim = self.catalog.claim(
                self.owner, self.lease_ms, kinds=self.kinds, world_id=world_id, host=self.host
            )
        except CommitUnknown as e:
            claim = self._claim_after_unknown(e)
        if claim is None:
            return None
        crash_point("after_claim")
        self._run(claim)
        return claim.record.key

    def run_key(self, key: ActivityKey) -> bool:
        """Claim exactly ``key`` and run its attempt to its recorded conclusion, as `run_next`
        runs the next one (for work that must not wait for a free worker: a move cancelled
        before its start concludes at once); whether it was claimable now (an attempt another
        worker holds, a parked one inside its backoff, a recorded result: False)."""
        try:
            claim = self.catalog.claim_key(key, self.owner, self.lease_ms, host=self.host)
        except CatalogRejection:
            return False
        except CommitUnknown as e:  # re-read before acting: run it only if the claim landed
            found = self._claim_after_unknown(e)
            if found is None:
                return False
            claim = found
        self._run(claim)
        return True

    def _reread(self, error: CommitUnknown) -> ActivityRecord | None:
        """The record a lost commit wrote if it landed, else None (re-read before acting)."""
        record = self.catalog.committed(error)
        log.warning(
            "worker %s: a commit reply was lost; re-read shows it %s",
            self.owner,
            "landed" if record is not None else "did not land",
        )
        return record

    def _claim_after_unknown(self, error: CommitUnknown) -> Claim | None:
        if error.key is None:  # it broke before any row was chosen: nothing was claimed
            return None
        record = self._reread(error)
        if record is None or record.attempt is None:
            return None
        return Claim(record, record.attempt)

    def _emit_safely(self, event: ProgressEvent) -> None:
        if self._emit is None:
            return
        try:
            self._emit(event)
        except Exception:  # a broken listener must not fail the attempt
            log.exception("progress listener failed")

    def _run(self, claim: Claim) -> None:
        record, attempt = claim.record, claim.attempt
        key, fence = record.key, attempt.fence
        family = self._by_kind[key.kind]
        if self.stop.is_set() and record.operation_id is None:
            self.catalog.release(key, fence)  # unbound: nothing started, reclaim is safe
            return
        beat = _Beat(self._heartbeat, key, fence)
        ctx = self._context(claim, beat)
        self._heartbeat.begin(beat, ctx)
        ended = False
        try:
            request = self._request(record)
            if attempt.may_execute:
                ended = self._execute(family, ctx, record, request)
            else:
                self._reconcile(family, ctx, request)
        except (LeaseLost, CatalogRejection) as e:
            log.warning("worker %s lost %s (fence %d): %s", self.owner, key, fence, e)
        finally:
            self._heartbeat.end(beat)
        if ended:
            self._give_up(key, fence, attempt.number)

    def _execute_ended(self, key: ActivityKey, exc: BaseException) -> bool:
        """Log an `execute` that raised; whether its error was typed. Either way the attempt
        concludes nothing (an execute attempt cannot conclude unknown): the next claim is
        reconcile-only. A typed refusal or failure (a `CodedError`: a latched robot, a device
        error, a lost transport) says what happened in its code and message, so no traceback,
        and its lease is shortened (`_give_up`); any other leaves the effect ambiguous, with
        its traceback, and the lease to run out."""
        if isinstance(exc, CodedError):
            log.warning(
                "worker %s: execute of %s ended with %s; leaving it to reconcile",
                self.owner,
                key,
                exc,
            )
            return True
        log.error(
            "worker %s: execute of %s failed; leaving it to reconcile",
            self.owner,
            key,
            exc_info=exc,
        )
        return False

    def _give_up(self, key: ActivityKey, fence: int, number: int) -> None:
        """Shorten an execute attempt's lease once its adapter ended it with a typed error (a
        stopped robot, a device fault, a remote that did not answer) and nothing of it acts
        any more (the heartbeat ended first), to `typed_end_lease_ms`: the next claim
        reconciles soon, not after the rest of the lease while the record reads as running.
        A lease that cannot be shortened (lost, or the store failing) runs out as before."""
        lease_ms = typed_end_lease_ms(number, self.lease_ms)
        try:
            self.catalog.renew(key, fence, lease_ms)
        except (CatalogRejection, CommitUnknown, CatalogStorageError) as e:
            log.debug("worker %s: the lease of %s runs out instead: %s", self.owner, key, e)

    def _request(self, record: ActivityRecord) -> dict[str, Any]:
        data = self.artifacts.get_bytes(record.input_ref, record.input_digest)
        request = json.loads(data)
        if not isinstance(request, dict):
            request = {"input": request}
        return request

    def _execute(
        self, family: Family, ctx: AttemptContext, record: ActivityRecord, request: dict[str, Any]
    ) -> bool:
        """Bind, then run the adapter's `execute` and record its result. True when the
        adapter ended the attempt with a typed error (see `_give_up`)."""
        key = ctx.key
        if record.operation_id is None:
            try:
                self.catalog.bind_provider_operation(key, ctx.fence, ctx.operation_id)
            except CommitUnknown as e:
                if self._reread(e) is None:
                    # The bind did not land: no effect may start. The lease runs out and the
                    # next claim starts over (still unbound, so it may execute).
                    log.warning("worker %s: bind of %s was lost; not executing", self.owner, key)
                    return False
        elif record.operation_id != ctx.operation_id:
            raise FamilyError(
                f"{key} is bound to {record.operation_id!r}, not {ctx.operation_id!r}"
            )
        crash_point("after_bind")
        try:
            result = family.adapter.execute(ctx, request)
        except LeaseLost:
            raise
        except (Exception, SystemExit) as e:  # an adapter's SystemExit ends no worker
            return self._execute_ended(key, e)
        if not isinstance(result, ResultRef) or not self.artifacts.is_durable(result):
            log.error(
                "worker %s: %s returned a non-durable %r; not recorded", self.owner, key, result
            )
            return False
        crash_point("after_effect")
        self._check_live(ctx)
        try:
            self._record_result(ctx, result)
        except CatalogRejection as e:
            if getattr(e, "code", None) != "bounds_exceeded":
                raise  # the attempt's own standing (a stale fence, an expired lease)
            # The adapter's mistake (a media type or reference past the catalog's bounds):
            # its effect ran, and no result can be recorded. Said as that, not as a lost
            # lease; the next attempt reconciles it (an execute attempt concludes nothing).
            log.error(
                "worker %s: execute of %s returned a result the catalog refuses (%s); not"
                " recorded: its next attempt reconciles it",
                self.owner,
                key,
                e,
            )
            return True
        crash_point("after_result")
        return False

    def _reconcile(self, family: Family, ctx: AttemptContext, request: dict[str, Any]) -> None:
        key = ctx.key
        try:
            outcome = family.adapter.reconcile(ctx, request)
        except LeaseLost:
            raise
        except (Exception, SystemExit) as e:  # an adapter's SystemExit ends no worker
            self._record_unknown(ctx, e)
            return
        self._check_live(ctx)
        why = self._unrecordable(outcome)
        if why is not None:
            # The adapter's mistake: recorded as it stands it would be refused, or reconciled
            # again every lease (never awaiting anyone), or kept as evidence nobody can read.
            self._record_unknown(ctx, FamilyError(f"reconcile returned {why}"))
            return
        if isinstance(outcome, Recovered):
            if not self.artifacts.is_durable(outcome.result):
                self._record_unknown(ctx, FamilyError("recovered result is not durable"))
                return
            self._record_result(ctx, outcome.result)
            crash_point("after_result")
        elif isinstance(outcome, ConfirmedAbsent):
            self._conclude(ctx, lambda: self.catalog.confirm_absent(key, ctx.fence, outcome.guard))
        elif isinstance(outcome, Unknown):
            self._conclude(
                ctx,
                lambda: self.catalog.record_unknown(
                    key, ctx.fence, outcome.evidence, outcome.retry_after_ms
                ),
            )
        else:
            self._record_unknown(ctx, FamilyError(f"reconcile returned {outcome!r}"))

    def _unrecordable(self, outcome: object) -> str | None:
        """Why a reconcile outcome cannot be recorded as it is (the adapter's mistake), or
        None: a conclusion of the wrong type, a backoff that is no int of 0 to
        `MAX_RETRY_AFTER_MS` (a bool is none), evidence not stored in the artifact store (an
        operator could not read it). What the core refuses besides is `_conclude`'s."""
        if isinstance(outcome, Recovered):
            if not isinstance(outcome.result, ResultRef):
                return f"Recovered({outcome.result!r}): not a ResultRef"
        elif isinstance(outcome, ConfirmedAbsent):
            if not isinstance(outcome.guard, RetryGuard):  # its ref: the provider's to name
                return f"ConfirmedAbsent({outcome.guard!r}): not a RetryGuard"
        elif isinstance(outcome, Unknown):
            evidence, retry = outcome.evidence, outcome.retry_after_ms
            if not isinstance(evidence, Evidence):
                return f"Unknown({evidence!r}): not an Evidence"
            if type(retry) is not int or not 0 <= retry <= MAX_RETRY_AFTER_MS:
                return f"Unknown(retry_after_ms={retry!r}): not an int of 0..{MAX_RETRY_AFTER_MS}"
            if not self._stored(evidence.ref, evidence.digest):
                return f"Unknown with evidence not in the artifact store ({evidence.ref!r})"
        return None

    def _stored(self, ref: object, digest: object) -> bool:
        if not isinstance(ref, str) or not isinstance(digest, str):
            return False
        try:
            self.artifacts.get_bytes(ref, digest)
        except (TetherError, ValueError, OSError):
            return False
        return True

    def _record_result(self, ctx: AttemptContext, result: ResultRef) -> None:
        """Record the result; after a lost commit, re-read and repeat it once if it did not land
        (an exact repeat under the same fence is a no-op in the core). If that fails too, the
        lease runs out and the next attempt reconciles the durable result."""
        try:
            self.catalog.record_result(ctx.key, ctx.fence, result)
        except CommitUnknown as e:
            if self._reread(e) is None:
                self.catalog.record_result(ctx.key, ctx.fence, result)

    def _conclude(self, ctx: AttemptContext, write: Callable[[], ActivityRecord]) -> None:
        """`_concluding` a reconcile's conclusion; one whose values the core refuses (a guard
        or evidence reference past its bounds: the adapter's mistake, `bounds_exceeded`) parks
        the Activity for an operator instead of being reconciled again every lease."""
        try:
            self._concluding(write)
        except CatalogRejection as e:
            if getattr(e, "code", None) != "bounds_exceeded":
                raise  # the attempt's own standing (a stale fence, an expired lease)
            self._record_unknown(
                ctx, FamilyError(f"reconcile returned what the catalog refuses: {e}")
            )

    def _concluding(self, write: Callable[[], ActivityRecord]) -> None:
        """A reconcile conclusion (absence or unknown evidence). After a lost commit it is
        re-read, never assumed: landed, the attempt has ended; not landed, the lease runs out
        and the next claim reconciles again. Nothing follows it in this attempt, so neither
        outcome can start an effect."""
        try:
            write()
        except CommitUnknown as e:
            self._reread(e)

    def _check_live(self, ctx: AttemptContext) -> None:
        if ctx.lost:
            raise LeaseLost(f"attempt {ctx.attempt} of {ctx.key} lost its lease")

    def _record_unknown(self, ctx: AttemptContext, error: BaseException) -> None:
        text = "".join(traceback.format_exception_only(error)).encode("utf-8", "replace")
        ref = self.artifacts.put_bytes(text[:4096], "text/plain")
        log.warning("worker %s: %s concluded unknown: %s", self.owner, ctx.key, error)
        evidence = Evidence(ref=ref.ref, digest=ref.digest)
        self._concluding(
            lambda: self.catalog.record_unknown(
                ctx.key, ctx.fence, evidence, ADAPTER_ERROR_RETRY_MS
            )
        )


#: The most worker threads one process runs (`tether worker --workers`, `[serve] workers`):
#: each holds a catalog connection of its own, and a heartbeat thread with another.
MAX_WORKERS = 64

#: After a renewal the store could not take, the heartbeat thread renews again this soon (s).
RENEW_RETRY_S = 1.0


def _no_pause() -> None:
    return None


class _Heartbeat:
    """Renews the lease of its worker's current attempt every third of the lease, from one
    thread started at the worker's first attempt and kept until `close` (a thread per attempt
    would cost more than a zero-work attempt), over its own catalog connection (opened at the
    first renewal). Beginning and ending an attempt wake nobody: the thread sleeps until the
    current attempt's renewal is due, or a third of the lease while there is none. Once an
    attempt ends no renewal of it runs any more."""

    def __init__(self, open_catalog: Callable[[], Catalog], lease_ms: int, name: str) -> None:
        self._open_catalog = open_catalog
        self._lease_ms = lease_ms
        self._interval_s = lease_ms / 3000
        self._name = name
        self._cond = threading.Condition()
        self._current: _Beat | None = None
        self._closed = False
        self._mutex = threading.Lock()  # one renewal at a time; `end` waits for it
        self._catalog: Catalog | None = None
        #: The last renewal failed (the store, not the lease): the next is the heartbeat
        #: thread's, over a fresh connection.
        self._failing = False
        self._thread: threading.Thread | None = None

    def begin(self, beat: _Beat, ctx: AttemptContext) -> None:
        """Start renewing the attempt's lease, first a third of the lease from now; a rejected
        renewal marks ``ctx`` lost."""
        beat.ctx = ctx
        now = time.monotonic()
        beat.due = now + self._interval_s
        if self._failing:
            # The last renewal (an earlier attempt's) failed and its connection was dropped:
            # until the heartbeat thread renews over a fresh one, `ctx.heartbeat()` renews
            # nothing (the attempt's own thread never waits for the store), so the thread
            # renews this attempt soon, not a third of the lease from now.
            beat.due = now + min(self._interval_s, RENEW_RETRY_S)
        # The claim was granted just before this (a round trip ago): the margin `renew` keeps,
        # a third of the lease, covers that.
        beat.held_until = now + self._lease_ms / 1000
        with self._cond:
            self._current = beat
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def end(self, beat: _Beat) -> None:
        """Stop renewing ``beat``; returns once no renewal of it is in flight. Its context
        says the attempt ended from then on (`AttemptContext.mark_ended`)."""
        if beat.ctx is not None:
            beat.ctx.mark_ended()
        with self._cond:
            if self._current is beat:
                self._current = None
        with self._mutex:
            beat.ended = True

    def renew(self, beat: _Beat, *, waiting: bool = True) -> bool:
        """Renew ``beat``'s lease now; whether it was renewed. A rejection is `LeaseLost`.

        A renewal the catalog could not take (its server restarting, a connection reset, a
        lost COMMIT reply) is not a lost lease: the lease granted last still holds, so the
        attempt goes on, and the heartbeat thread renews it over a fresh connection within
        `RENEW_RETRY_S`. Only once the lease may run out before a renewal lands (a third of
        the lease short of `held_until`) is it `LeaseLost`, so the attempt stops while it
        still holds the lease.

        Not ``waiting`` (an adapter's `ctx.heartbeat()`, between the steps of its work): while
        a renewal is in flight, or after a failed one, the attempt's own thread never waits
        for the store: it only checks that the lease still holds."""
        if waiting:
            self._mutex.acquire()
        elif not self._mutex.acquire(blocking=False):  # the heartbeat thread renews it now
            self._check_held(beat, None)
            return False
        try:
            if beat.ended:
                return False
            if not waiting and self._failing:
                self._check_held(beat, None)  # reopening it is the heartbeat thread's
                return False
            asked = time.monotonic()
            try:
                if self._catalog is None:
                    self._catalog = self._open_catalog()
                self._catalog.renew(beat.key, beat.fence, self._lease_ms)
            except CatalogRejection as e:
                raise LeaseLost(f"renewal of {beat.key} fence {beat.fence} rejected: {e}") from e
            except (TetherError, OSError) as e:  # the store failed, not the lease
                self._drop_catalog()
                self._failing = True
                self._check_held(beat, e)
                with self._cond:  # the heartbeat thread renews it again soon
                    beat.due = min(beat.due, time.monotonic() + RENEW_RETRY_S)
                    self._cond.notify_all()
                log.warning(
                    "heartbeat of %s: renewal failed (%s); its lease holds %.1f s more and is"
                    " renewed again in %g s",
                    beat.key,
                    e,
                    beat.held_until - time.monotonic(),
                    RENEW_RETRY_S,
                )
                return False
            self._failing = False
            # Granted at the server at or after `asked`: it holds at least a lease from then.
            beat.held_until = asked + self._lease_ms / 1000
            return True
        finally:
            self._mutex.release()

    def _check_held(self, beat: _Beat, error: BaseException | None) -> None:
        """`LeaseLost` once ``beat``'s lease may run out within a third of the lease (the
        time the attempt keeps to stop while it still holds it)."""
        if time.monotonic() < beat.held_until - self._interval_s:
            return
        why = f" ({error})" if error is not None else ""
        raise LeaseLost(
            f"the lease of {beat.key} fence {beat.fence} was not renewed{why} and may run out:"
            " stopping while it still holds"
        )

    def _drop_catalog(self) -> None:
        """Close the renewal connection (a broken one is never used again); the next renewal
        opens a fresh one."""
        catalog, self._catalog = self._catalog, None
        if catalog is not None:
            try:
                catalog.close()
            except Exception:  # a broken connection's close may fail too
                pass

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                beat = self._current
                if beat is None:
                    self._cond.wait(self._interval_s)
                    continue
                wait_s = beat.due - time.monotonic()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue  # re-read: it may have ended, or another attempt begun
                beat.due += self._interval_s
                self._cond.release()
                try:
                    self.renew(beat)
                except LeaseLost:
                    if beat.ctx is not None:
                        beat.ctx.mark_lost()
                    with self._cond:
                        if self._current is beat:
                            self._current = None
                except Exception:
                    log.exception("heartbeat of %s failed", beat.key)
                finally:
                    self._cond.acquire()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._current = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        with self._mutex:
            if self._catalog is not None:
                self._catalog.close()
                self._catalog = None


class _Beat:
    """One attempt under a `_Heartbeat`: its key, fence and (once begun) context."""

    def __init__(self, heartbeat: _Heartbeat, key: ActivityKey, fence: int) -> None:
        self.heartbeat = heartbeat
        self.key, self.fence = key, fence
        self.ctx: AttemptContext | None = None
        self.due = 0.0  # time.monotonic() of its next renewal
        #: Until when (time.monotonic()) its lease surely holds: from its last renewal asked.
        self.held_until = 0.0
        self.ended = False

    def renew_now(self) -> None:
        """Renew now (an adapter's `ctx.heartbeat()`), never waiting for the store when the
        heartbeat thread renews it (`_Heartbeat.renew`); `LeaseLost` once the lease is gone."""
        self.heartbeat.renew(self, waiting=False)
