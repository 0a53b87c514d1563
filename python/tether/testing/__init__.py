"""Test Activity families and adapters against the real catalog and ledger, on a fake clock.

`ActivityEnvironment` opens the production SQLite catalog, world ledger and artifact store in
a temp dir and runs Tether's runtime without threads: the test calls each step (commit a
tick, run one attempt, observe) and moves time with a `FakeClock`, so leases, retry delays
and crash recovery are deterministic. Nothing is mocked but time. In the spirit of Temporal's
`ActivityEnvironment`; the runtime's parts (`Projector`, `Settler`, `ObservationStager`,
`Ticker`, `Observer`, `WorkerPool`, `WorldLifecycle`) can each be built alone from its
`catalog`, `ledger` and `artifacts`.

An adapter that performs its effect and then dies before returning must be reconciled, not
re-executed, once its lease runs out:

>>> from tether.activities import RetryGuard
>>> from tether.runtime import ActivityRequest, ConfirmedAbsent, Family, Recovered
>>> from tether.testing import ActivityEnvironment
>>> from tether.world import ComponentWrite, canonical_json, digest_of
>>> def project(snapshot):
...     return [ActivityRequest("demo.echo", e, v) for e, v in snapshot.changed("echo.intent")]
>>> def stage(staged):
...     return [ComponentWrite(staged.key.activity_id, "echo.observed", staged.json())]
>>> class DiesAfterTheEffect:
...     def __init__(self):
...         self.effects = {}  # the provider's own record, by operation id
...     def execute(self, ctx, request):
...         ref = ctx.artifacts.put_bytes(canonical_json(request), "application/json")
...         self.effects[ctx.operation_id] = ref
...         raise RuntimeError("the worker died before recording the result")
...     def reconcile(self, ctx, request):
...         if ctx.operation_id in self.effects:
...             return Recovered(self.effects[ctx.operation_id])
...         return ConfirmedAbsent(RetryGuard("echo:none", digest_of(b"none")))
>>> adapter = DiesAfterTheEffect()
>>> family = Family("demo", ("demo.echo",), project, adapter, stage)
>>> with ActivityEnvironment([family]) as env:
...     _ = env.create_world("w")
...     intent = env.commit_tick("w", [ComponentWrite("job-1", "echo.intent", {"say": "hi"})])
...     key = env.key("job-1")
...     assert env.get(key).source == intent          # admitted from the intent tick
...     first = env.run_attempt()                     # execute raises: nothing recorded
...     assert first.result is None and first.operation_id is not None
...     assert env.run_attempt() is None              # still leased
...     env.clock.advance(env.lease_ms)               # the lease runs out
...     second = env.run_attempt()                    # reconcile-only: recovered, not rerun
...     assert second.attempt_count == 2 and second.result is not None
...     [observed] = env.observe()                    # stage, commit, settle
...     assert env.get(key).settlement.receipt == observed
...     env.snapshot("w").get("job-1", "echo.observed")
{'say': 'hi'}
>>> len(adapter.effects)  # one effect, although two attempts ran
1
"""

from tether.testing._clock import START_MS, FakeClock
from tether.testing._environment import ActivityEnvironment

__all__ = ["START_MS", "ActivityEnvironment", "FakeClock"]
