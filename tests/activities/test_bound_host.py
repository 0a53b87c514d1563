"""Device-bound claims on both backends: work bound to a device's host is claimed only on that
host (recorded with the Activity as `bound_host`); unbound work (simulation, remote) anywhere."""

from __future__ import annotations

import dataclasses

import pytest
from tether.activities import Admission, Catalog, operation_id_for
from tether.errors import AdmissionConflict, BoundsExceeded, WrongHost

from tests.activities.support import ManualClock, admission, key, result


def on_host(adm: Admission, host: str) -> Admission:
    return dataclasses.replace(adm, bound_host=host)


def test_bound_work_is_claimed_only_on_its_host_and_free_work_anywhere(
    catalog: Catalog, clock: ManualClock
) -> None:
    arm, free = key("arm"), key("free")
    rec = catalog.admit(on_host(admission(arm), "arm-host"))
    assert rec.bound_host == "arm-host" and rec.admission.bound_host == "arm-host"
    catalog.admit(admission(free))
    # Another host, and a claim naming no host, never see the bound activity.
    c = catalog.claim("b/w0", 1_000, host="other-host")
    assert c is not None and c.key == free
    assert catalog.claim("b/w1", 1_000, host="other-host") is None
    assert catalog.claim("anon", 1_000) is None
    assert catalog.claimable_in_ms(host="other-host") == 1_000  # only its own lease, later
    assert catalog.claimable_in_ms(host="arm-host") == 0
    with pytest.raises(WrongHost, match="arm-host"):
        catalog.claim_key(arm, "b/w1", 1_000, host="other-host")
    with pytest.raises(WrongHost):
        catalog.claim_key(arm, "anon", 1_000)
    # The owning host claims it; a takeover after its lease is the owning host's too.
    c = catalog.claim("a/w0", 1_000, host="arm-host")
    assert c is not None and c.key == arm and c.attempt.fence == 1
    clock.advance(1_001)
    assert catalog.claim("b/w0", 1_000, host="other-host") is not None  # free, expired
    assert catalog.claim("b/w0", 1_000, host="other-host") is None
    again = catalog.claim("a/w1", 1_000, host="arm-host")
    assert again is not None and again.key == arm and again.attempt.fence == 2
    # Every other transition is fenced as before; the binding stays through the result.
    catalog.bind_provider_operation(arm, 2, operation_id_for(arm))
    done = catalog.record_result(arm, 2, result("arm"))
    assert done.bound_host == "arm-host" and done.claimable_from_ms is None


def test_the_binding_is_immutable_and_bounded(catalog: Catalog) -> None:
    arm = key("arm")
    catalog.admit(on_host(admission(arm), "arm-host"))
    with pytest.raises(AdmissionConflict) as e:
        catalog.admit(on_host(admission(arm), "other-host"))
    assert e.value.field == "bound_host"
    with pytest.raises(AdmissionConflict):
        catalog.admit(admission(arm))  # unbinding is a change too
    assert catalog.admit(on_host(admission(arm, tick=4), "arm-host")).bound_host == "arm-host"
    with pytest.raises(BoundsExceeded):
        catalog.admit(on_host(admission(key("x")), "h" * 513))
    with pytest.raises(BoundsExceeded):
        catalog.claim("w", 1_000, host="")


def test_bound_rows_of_other_hosts_never_strand_a_claim(catalog: Catalog) -> None:
    """Many claimable rows bound to a host that is down sit ahead in claim order; a claim on
    another host still finds the unbound row behind them, and pages of the claimable view
    list them all."""
    for i in range(40):
        catalog.admit(on_host(admission(key(f"dev{i:02}")), "down-host"))
    catalog.admit(admission(key("sim")))
    c = catalog.claim("w", 1_000, host="up-host")
    assert c is not None and c.key == key("sim")
    assert catalog.claim("w", 1_000, host="up-host") is None
    assert len(list(catalog.iter_claimable(page_size=7))) == 40
