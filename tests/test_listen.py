"""The listener policy every network listener shares (tether._listen): loopback unless TLS,
the TLS key's owner and mode, a principal off loopback, no secret in a URL; and the strict
`[tls]` table of host.toml."""

from __future__ import annotations

import ast
import os
import ssl
from pathlib import Path

import pytest
import tether
from tether import _listen
from tether._listen import ListenerError, ListenerPolicy, Refusal, TlsConfig
from tether.devices import credentials
from tether.devices.config import parse_config
from tether.errors import HostConfigError

from tests._listeners import make_cert, make_dated_cert, require_non_loopback_address
from tests._secrets import OBSERVER, OPERATOR, PLANNER

FAST = credentials.MINIMUM


def config(state_dir: Path, extra: str = "") -> str:
    return (
        f'[host]\nstate_dir = "{state_dir}"\n'
        f'[operators.ann]\ncredential = "{credentials.hash_secret(OPERATOR, FAST)}"\n'
        f'[planners.ci]\ntoken = "{credentials.hash_secret(PLANNER, FAST)}"\n'
        f'[planners.dash]\ntoken = "{credentials.hash_secret(OBSERVER, FAST)}"\n'
        'role = "observer"\n' + extra
    )


@pytest.fixture
def cert(tmp_path: Path) -> TlsConfig:
    made = make_cert(tmp_path / "tls")
    return TlsConfig(made.cert, made.key)


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.0.2.7", "10.1.2.3", "fe80::1"])
def test_a_plain_listener_off_loopback_is_refused_naming_the_address(host: str) -> None:
    with pytest.raises(ListenerError) as info:
        ListenerPolicy((host, 8765))
    assert info.value.code == "insecure_listener"
    assert "8765" in info.value.details["address"] and "[tls]" in info.value.message
    assert isinstance(info.value, OSError)  # reported like a bind failure by its callers
    assert str(info.value).startswith("insecure_listener: ") and "\n" not in str(info.value)


def test_the_machines_own_address_is_not_loopback() -> None:
    address = require_non_loopback_address()
    assert not _listen.is_loopback(address)
    with pytest.raises(ListenerError) as info:
        ListenerPolicy((address, 0))
    assert info.value.details["address"] == f"{address}:0"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_neither_tls_nor_a_principal(host: str) -> None:
    policy = ListenerPolicy((host, 0))
    assert policy.loopback and not policy.require_principal and policy.scheme == "http"
    assert policy.authorize({}) is None
    assert policy.authorize({"Host": "127.0.0.1:8765"}) is None
    assert policy.authorize({"Host": "[::1]:8765"}) is None
    assert policy.authorize({"Host": "localhost"}) is None


def test_a_loopback_listener_refuses_a_foreign_host_header() -> None:
    # A web page that rebinds its own name to 127.0.0.1 still sends its name as Host.
    with pytest.raises(Refusal) as info:
        ListenerPolicy(("127.0.0.1", 0)).authorize({"Host": "evil.example:8765"})
    assert info.value.code == "host_not_loopback" and info.value.status == 403


def test_off_loopback_a_listener_needs_an_authenticator(cert: TlsConfig) -> None:
    with pytest.raises(ListenerError) as info:
        ListenerPolicy(("0.0.0.0", 0), cert)
    assert info.value.code == "no_authenticator"
    with pytest.raises(ListenerError) as info:
        ListenerPolicy(("127.0.0.1", 0), require_principal=True)
    assert info.value.code == "no_authenticator"


def test_a_bearer_principal_is_required_off_loopback(tmp_path: Path, cert: TlsConfig) -> None:
    auth = parse_config(config(tmp_path)).authenticator()
    policy = ListenerPolicy(("0.0.0.0", 0), cert, auth)
    assert policy.require_principal and policy.scheme == "https"
    cases = [
        ({}, "principal_required", 401),
        ({"Authorization": ""}, "principal_required", 401),
        ({"Authorization": f"Basic {PLANNER}"}, "principal_required", 401),
        ({"Authorization": "Bearer "}, "principal_required", 401),
        ({"Authorization": "Bearer wrong-token-entirely"}, "credential_refused", 401),
    ]
    for headers, code, status in cases:
        with pytest.raises(Refusal) as info:
            policy.authorize(headers)
        assert (info.value.code, int(info.value.status)) == (code, status)
        assert info.value.headers["WWW-Authenticate"].startswith("Bearer")
    principal = policy.authorize({"Authorization": f"Bearer {PLANNER}"}, action="stop")
    assert principal is not None and principal.name == "ci"
    assert policy.authorize({"authorization": f"bearer {OBSERVER}"}) is not None  # read
    with pytest.raises(Refusal) as info:
        policy.authorize({"Authorization": f"Bearer {OBSERVER}"}, action="stop")
    assert (info.value.code, int(info.value.status)) == ("role_refused", 403)


def test_too_many_failures_answer_429_with_retry_after(tmp_path: Path, cert: TlsConfig) -> None:
    auth = parse_config(config(tmp_path)).authenticator()
    policy = ListenerPolicy(("0.0.0.0", 0), cert, auth)
    for _ in range(credentials.RATE_LIMIT):
        with pytest.raises(Refusal):
            policy.authorize({"Authorization": "Bearer guessed-token-0000"})
    with pytest.raises(Refusal) as info:
        policy.authorize({"Authorization": f"Bearer {PLANNER}"})
    assert (info.value.code, int(info.value.status)) == ("credential_rate_limited", 429)
    assert 1 <= int(info.value.headers["Retry-After"]) <= credentials.RATE_WINDOW_S + 1


@pytest.mark.parametrize(
    "target",
    ["/events?token=x", "/events?a=1&Access_Token=x", "/?key=", "/events?auth=1&x=2"],
)
def test_a_secret_in_the_url_is_refused_on_every_listener(target: str) -> None:
    with pytest.raises(Refusal) as info:
        ListenerPolicy(("127.0.0.1", 0)).authorize({}, target=target)
    assert (info.value.code, int(info.value.status)) == ("secret_in_url", 400)
    ListenerPolicy(("127.0.0.1", 0)).authorize({}, target="/events?since=3")  # others pass
    assert _listen.log_target("/events?token=abc#x") == "/events"


def test_the_tls_key_must_be_0600_and_the_daemons(tmp_path: Path, cert: TlsConfig) -> None:
    assert cert.context().minimum_version == ssl.TLSVersion.TLSv1_2
    key, chain = cert.pem()
    assert b"PRIVATE KEY" in key and b"BEGIN CERTIFICATE" in chain
    cert.key.chmod(0o640)
    with pytest.raises(ListenerError) as info:
        ListenerPolicy(("127.0.0.1", 0), cert)
    assert info.value.code == "insecure_tls_key" and "0640" in info.value.message
    with pytest.raises(ListenerError):
        cert.pem()  # a listener that takes the pair itself gets the same check
    cert.key.chmod(0o600)
    if os.getuid() == 0:  # only root can give a file away
        os.chown(cert.key, 65534, -1)
        with pytest.raises(ListenerError) as info:
            ListenerPolicy(("127.0.0.1", 0), cert)
        assert info.value.code == "insecure_tls_key" and info.value.details["uid"] == 65534


def test_an_unusable_certificate_or_key_is_refused(tmp_path: Path, cert: TlsConfig) -> None:
    other = make_cert(tmp_path / "other")
    for tls in (
        TlsConfig(cert.cert, other.key),  # a key of another certificate
        TlsConfig(tmp_path / "missing.pem", cert.key),
        TlsConfig(cert.cert, tmp_path / "missing.key"),
    ):
        with pytest.raises(ListenerError) as info:
            ListenerPolicy(("127.0.0.1", 0), tls)
        assert info.value.code == "tls_unusable" and "\n" not in str(info.value)


def test_an_expired_certificate_is_refused_and_one_near_its_end_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every client would refuse an expired certificate's handshake: it is `tls_unusable`,
    naming its end. One expiring within `EXPIRY_WARNING_DAYS`, or not valid yet by this
    host's clock (clients judge by theirs), is served with one warning per process."""
    expired = make_dated_cert(tmp_path / "expired", "20200101000000Z", "20200102000000Z")
    with pytest.raises(ListenerError) as info:
        ListenerPolicy(("127.0.0.1", 0), TlsConfig(expired.cert, expired.key))
    assert info.value.code == "tls_unusable", info.value
    assert "expired on Jan  2 00:00:00 2020 GMT" in info.value.message
    with pytest.raises(ListenerError):
        TlsConfig(expired.cert, expired.key).pem()  # gRPC's pair: the same check
    soon = make_dated_cert(tmp_path / "soon", "20200101000000Z", "20991231000000Z")
    tls = TlsConfig(soon.cert, soon.key)
    caplog.set_level("WARNING", logger="tether.listen")
    tls.check_dates()  # decades left: nothing said
    assert not caplog.records
    end = ssl.cert_time_to_seconds("Dec 31 00:00:00 2099 GMT")
    tls.check_dates(now=end - 3 * 86_400)
    tls.check_dates(now=end - 2 * 86_400)  # once per process
    (warned,) = caplog.records
    assert "expires on Dec 31 00:00:00 2099 GMT (in 3.0 days)" in warned.getMessage()
    later = make_dated_cert(tmp_path / "later", "20980101000000Z", "20991231000000Z")
    ListenerPolicy(("127.0.0.1", 0), TlsConfig(later.cert, later.key))  # served
    assert "is not valid before Jan  1 00:00:00 2098 GMT" in caplog.records[-1].getMessage()


def test_the_tls_table_is_strict_and_relative_to_the_config(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "host.toml"
    cfg = parse_config(config(tmp_path, '[tls]\ncert = "tls/a.pem"\nkey = "/k/a.key"\n'), path)
    assert cfg.tls == TlsConfig(tmp_path / "etc" / "tls" / "a.pem", Path("/k/a.key"))
    assert parse_config(config(tmp_path)).tls is None
    mutual = parse_config(
        config(tmp_path, '[tls]\ncert = "a.pem"\nkey = "a.key"\nclient_ca = "ca/roots.pem"\n'),
        path,
    )
    assert mutual.tls is not None and mutual.tls.client_ca == tmp_path / "etc" / "ca" / "roots.pem"
    for table, code in (
        ('[tls]\ncert = "a.pem"\nkey = "a.key"\nclient_cas = "ca.pem"\n', "unknown_key"),
        ('[tls]\ncert = "a.pem"\nkey = "a.key"\nclient_ca = 1\n', "wrong_type"),
        ('[tls]\ncert = "a.pem"\nkye = "a.key"\n', "unknown_key"),
        ('[tls]\ncert = "a.pem"\n', "missing_key"),
        ('[tls]\ncert = 1\nkey = "a.key"\n', "wrong_type"),
        # Empty (a template's unset variable): never the config's own directory.
        ('[tls]\ncert = ""\nkey = "a.key"\n', "empty_value"),
        ('[tls]\ncert = "a.pem"\nkey = " "\n', "empty_value"),
        ('[tls]\ncert = "a.pem"\nkey = "a.key"\nclient_ca = ""\n', "empty_value"),
    ):
        with pytest.raises(HostConfigError) as info:
            parse_config(config(tmp_path, table), path)
        assert info.value.code == code


def test_every_listener_code_is_listed() -> None:
    tree = ast.parse((Path(tether.__file__).parent / "_listen.py").read_text())
    used: dict[str, set[str]] = {"ListenerError": set(), "Refusal": set()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in used:
            first = node.args[0]
            if isinstance(first, ast.Constant):
                used[node.func.id].add(first.value)  # type: ignore[union-attr]
    assert used["ListenerError"] == set(_listen.CODES)
    assert used["Refusal"] <= set(_listen.REFUSALS)
    with pytest.raises(ValueError):
        ListenerError("made_up", "x")
    with pytest.raises(ValueError):
        Refusal("made_up", "x")
