"""A password in a PostgreSQL URL is never shown: not by `redact`, not in the one-line error of
a URL libpq cannot parse or would misread, not by `tether db status` (plain or ``--json``).

Passwords here are two marked halves (`PARTS`), so a test also sees a piece of one: libpq
splits a password holding an unescaped ``/`` or ``@`` and would show a piece as a host."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tether.cli import main as tether
from tether.storage._pg import AMBIGUOUS_URL, check_url, connect, where
from tether.storage._urls import REDACTED, ambiguous, redact, scrub

#: The two halves of every password here; neither may appear in what Tether prints.
PARTS = ("Xy7kq", "Qz9vw")
PW = "".join(PARTS)


class UrlProblem(Exception):
    """The typed error the functions under test raise."""


def _clean(text: str) -> None:
    for part in PARTS:
        assert part not in text, text


# -- redact ---------------------------------------------------------------------------------


def test_redact_masks_every_password_form() -> None:
    cases = {
        # URI user info, also a password holding an unescaped `@` or `/`.
        f"postgresql://ann:{PW}@h/db": "postgresql://ann:***@h/db",
        f"postgresql://ann:{PARTS[0]}@{PARTS[1]}@h/db": "postgresql://ann:***@h/db",
        f"postgresql://ann:{PARTS[0]}/{PARTS[1]}@h:5432/db": "postgresql://ann:***@h:5432/db",
        f"postgres://ann:{PARTS[0]}%40{PARTS[1]}@h/db": "postgres://ann:***@h/db",
        # Query parameters, in any case and percent-encoded keys; the others stay.
        f"postgresql://h/db?password={PW}": "postgresql://h/db?password=***",
        f"postgresql://h/db?sslmode=require&PassWord={PW}&options=-cx%3D1": (
            "postgresql://h/db?sslmode=require&PassWord=***&options=-cx%3D1"
        ),
        f"postgresql://h/db?sslpassword={PW}": "postgresql://h/db?sslpassword=***",
        f"postgresql://h/db?pass%77ord={PW}": "postgresql://h/db?pass%77ord=***",
        f"postgresql://h/db?password={PARTS[0]}&{PARTS[1]}": "postgresql://h/db?password=***",
        f"postgresql://ann:{PW}@h/db?password={PW}": "postgresql://ann:***@h/db?password=***",
        # key=value connection strings: plain, quoted, escaped, spaced.
        f"host=127.0.0.1 password={PW} dbname=test": "host=127.0.0.1 password=*** dbname=test",
        f"host=h password='{PARTS[0]} {PARTS[1]}' dbname=x": "host=h password=*** dbname=x",
        f"host=h password = '{PARTS[0]}\\'{PARTS[1]}'": "host=h password = ***",
        f"host=h password={PARTS[0]}\\ {PARTS[1]}": "host=h password=***",
        f"host=h sslpassword={PW}": "host=h sslpassword=***",
        f"host=h password={PW} sslrootcert=file://x@y": "host=h password=*** sslrootcert=file://x@y",
        f"host=h password='{PARTS[0]} {PARTS[1]}": "host=h password=***",  # unterminated
        # Other schemes (the "unsupported URL" errors show them).
        f"mysql://ann:{PW}@h/x?password={PW}": "mysql://ann:***@h/x?password=***",
        # Nothing to mask.
        "postgresql://ann@h/db?options=-csearch_path%3Dx": (
            "postgresql://ann@h/db?options=-csearch_path%3Dx"
        ),
        "host=h dbname=x": "host=h dbname=x",
    }
    for url, shown in cases.items():
        assert redact(url) == shown, url
        _clean(redact(url))
    # A password and an `@` elsewhere: everything up to the last `@` may be the password.
    _clean(redact(f"postgresql://ann:{PARTS[0]}@h/db?application_name={PARTS[1]}@x"))


# -- URLs libpq would misread ---------------------------------------------------------------


def test_ambiguous_tells_the_urls_libpq_would_misread_from_valid_ones() -> None:
    misread = [
        f"postgresql://u:{PARTS[0]}/{PARTS[1]}@127.0.0.1/test",  # host u, port, dbname
        f"postgresql://u:{PARTS[0]}@{PARTS[1]}@127.0.0.1/test",  # host `...@127.0.0.1`
        f"postgres://u:12/{PARTS[1]}@127.0.0.1:5432/test",  # a numeric port `12`
        f"postgresql://u:{PARTS[0]}?a/{PARTS[1]}@127.0.0.1/test",
        f"postgresql://u:{PARTS[0]}@s?{PARTS[1]}@127.0.0.1/test",
        f"postgresql://u:{PARTS[0]}@s/{PARTS[1]}@127.0.0.1/test",
        f"postgresql://u:{PW}@h/db?application_name=a@b",  # a password, then another @
    ]
    valid = [
        "postgresql://127.0.0.1/test?options=-csearch_path%3Dx",
        "postgresql://user@host/db",
        f"postgresql://u:{PARTS[0]}%40%2F{PARTS[1]}@h:5432/db",
        f"postgresql://u:{PARTS[0]}?{PARTS[1]}@h/db",  # libpq reads this one right
        "postgresql://h:5432/db?user=me@srv",
        "postgresql://u@h/db?application_name=a@b",
        "postgresql://u:pw@h1:5432,h2:5433/db",
        "postgresql://[::1]:5432/db",
        "postgresql://h/my@db",
        "host=h password=a@b/c dbname=x",
    ]
    assert [u for u in misread if not ambiguous(u)] == []
    assert [u for u in valid if ambiguous(u)] == []
    for url in valid:
        check_url(url, UrlProblem)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"postgresql://u:{PARTS[0]}/{PARTS[1]}@127.0.0.1/test", AMBIGUOUS_URL),
        (f"postgresql://u:{PARTS[0]}@{PARTS[1]}@127.0.0.1/test", AMBIGUOUS_URL),
        (f"postgres://u:{PARTS[0]}/{PARTS[1]}@127.0.0.1:5432/test", AMBIGUOUS_URL),
        (f"postgresql://u:{PARTS[0]}%zz{PARTS[1]}@127.0.0.1/test", "invalid percent-encoded"),
        (f"postgresql://u:{PARTS[0]}%00{PARTS[1]}@127.0.0.1/test", "forbidden value %00"),
        (f"postgresql://u:{PW}@[::1/test", "IPv6 host address"),
        (f"postgresql://127.0.0.1/test?password={PARTS[0]}%zz{PARTS[1]}", "percent-encoded"),
        (f"POSTGRESQL://u:{PW}@127.0.0.1/test", "connection info string"),
    ],
)
def test_a_bad_url_is_one_line_without_its_password(url: str, says: str) -> None:
    with pytest.raises(UrlProblem) as raised:
        check_url(url, UrlProblem)
    message = str(raised.value)
    assert message.startswith("invalid PostgreSQL URL") and says in message
    if says != AMBIGUOUS_URL and "[::1" not in url and url.startswith("postgres"):
        assert "URL for 127.0.0.1" in message, message  # the server it was meant for
    assert "\n" not in message and raised.value.__cause__ is None
    _clean(message)
    with pytest.raises(UrlProblem) as again:
        connect(url, UrlProblem, application="tether-test")
    assert str(again.value) == message
    _clean(where(url))
    assert "u:" not in where(url)


@pytest.mark.parametrize("password", ["hunter#2", "hun?ter2", "pass#"])
def test_a_refused_url_names_its_server_never_a_piece_of_its_password(password: str) -> None:
    """An unencoded `#` or `?` in a password would cut a plain split of the URL inside it: the
    server named in the refusal is read off the URL with its passwords masked."""
    url = f"postgresql://ann:{password}@db.example/app?sslmod=require"
    with pytest.raises(UrlProblem) as raised:
        check_url(url, UrlProblem)
    message = str(raised.value)
    assert "URL for db.example/app: " in message, message
    assert password.rstrip("#")[:3] not in message and "ann" not in message, message


def test_every_host_of_a_url_is_named_with_its_own_cause(pg_base: str) -> None:
    """A host that accepts and never answers (its connect times out) is named beside one that
    answered: the driver lists a timeout in words of its own, without the server's name."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    port = silent.getsockname()[1]
    user, at, live = urlsplit(pg_base).netloc.rpartition("@")  # the test server's own login
    try:
        url = f"postgresql://{user}{at}{live},127.0.0.1:{port}/tether_no_such_db?connect_timeout=2"
        with pytest.raises(UrlProblem) as raised:
            connect(url, UrlProblem, application="tether-test")
    finally:
        silent.close()
    message = str(raised.value)
    assert getattr(raised.value, "code", None) == "no_such_database", message
    assert f"127.0.0.1:{port}: connection timeout expired" in message, message
    assert 'database "tether_no_such_db" does not exist' in message and "\n" not in message


def test_no_home_directory_to_find_a_password_file_in_is_no_hint_and_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service without HOME and without a passwd entry: the refused login's hint about an
    ignored password file is left out, never a traceback instead of `login_refused`."""
    import pwd

    from tether.storage._pg import _ignored_passfile

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("PGPASSFILE", raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert _ignored_passfile({}) == ""


def test_a_percent_encoded_value_that_is_not_utf8_is_a_typed_error() -> None:
    url = "postgresql://127.0.0.1/test?options=%ff"
    assert where(url) == "an unparsable PostgreSQL URL"
    for call in (
        lambda: check_url(url, UrlProblem),
        lambda: connect(url, UrlProblem, application="t"),
    ):
        with pytest.raises(
            UrlProblem, match=r"^invalid PostgreSQL URL for 127\.0\.0\.1/test: .* not UTF-8$"
        ):
            call()


def test_scrub_takes_passwords_out_of_libpq_messages_and_keeps_the_rest() -> None:
    url = f"postgresql://u:{PARTS[0]}%zz{PARTS[1]}@h/db?sslmode=foo"
    said = f'invalid percent-encoded token: "{PARTS[0]}%zz{PARTS[1]}"'
    assert scrub(said, url) == f'invalid percent-encoded token: "{REDACTED}"'
    assert scrub('invalid sslmode value: "foo"', url) == 'invalid sslmode value: "foo"'
    whole = f"postgresql://u:{PW}@[::1/test"
    assert scrub(f'in URI: "{whole}"', whole) == f'in URI: "{REDACTED}"'
    kv = f"host=h password='{PARTS[0]} {PARTS[1]}'"
    assert scrub(f"bad {PARTS[0]} {PARTS[1]} here", kv) == f"bad {REDACTED} here"
    # The login's name is no secret: libpq's `for user "ann"` keeps it, unless it is the
    # password too.
    named = f"postgresql://ann:{PW}@h/db"
    said = 'FATAL:  password authentication failed for user "ann"'
    assert scrub(said, named) == said
    same = "postgresql://ann:ann@h/db"
    assert scrub(said, same) == f'FATAL:  password authentication failed for user "{REDACTED}"'
    # A password holding a double quote: the quotes mislead, the plain replacement does not.
    quote = f'postgresql://u:{PARTS[0]}"{PARTS[1]}%zz@h/db'
    _clean(scrub(f'invalid percent-encoded token: "{PARTS[0]}"{PARTS[1]}%zz"', quote))


# -- the command line -----------------------------------------------------------------------

OFFLINE = [
    f"postgresql://ann:{PARTS[0]}/{PARTS[1]}@127.0.0.1:1/x",
    f"postgresql://ann:{PARTS[0]}@{PARTS[1]}@127.0.0.1:1/x",
    f"postgresql://ann:{PARTS[0]}%zz{PARTS[1]}@127.0.0.1:1/x",
    f"postgresql://ann:{PW}@[::1/x",
    f"postgresql://127.0.0.1:1/x?password={PARTS[0]}%zz{PARTS[1]}",
    f"host=127.0.0.1 port=1 password={PW} dbname=x",
    f"host=127.0.0.1 password='{PARTS[0]} {PARTS[1]}' dbname=x",
    f"mysql://h/x?password={PW}",
]


@pytest.mark.parametrize("as_json", [False, True])
def test_db_status_never_shows_a_password_of_a_bad_url(
    as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    for url in OFFLINE:
        capsys.readouterr()
        code = tether(["db", "status", url, *(["--json"] if as_json else [])])
        out, err = capsys.readouterr()
        assert code != 0 and "Traceback" not in err, url
        assert err.count("\n") == 1, err
        _clean(out + err)


def _with_password(pg_url: str, user: str) -> list[str]:
    """``pg_url`` carrying the password `PW` each way a URL can."""
    parts = urlsplit(pg_url)
    hostport = parts.netloc.rpartition("@")[2]
    userinfo = urlunsplit(parts._replace(netloc=f"{user}:{PW}@{hostport}"))
    return [
        userinfo,
        urlunsplit(parts._replace(netloc=f"{user}:{PARTS[0]}%40%2F{PARTS[1]}@{hostport}")),
        f"{pg_url}&password={PW}",
        f"{pg_url}&sslpassword={PW}",
    ]


@pytest.mark.parametrize("as_json", [False, True])
def test_db_status_never_shows_the_password_of_a_url_it_opened(
    pg_url: str, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    if urlsplit(pg_url).password or os.environ.get("PGPASSWORD"):
        pytest.skip("the test server needs a password: one in the URL would replace it")
    with psycopg.connect(pg_url) as conn:  # under trust auth, a password is not checked
        row = conn.execute("SELECT current_user").fetchone()
    assert row is not None
    for url in _with_password(pg_url, str(row[0])):
        capsys.readouterr()
        code = tether(["db", "status", url, *(["--json"] if as_json else [])])
        out, err = capsys.readouterr()
        assert code == 1, err  # a report of an empty schema: no store there, exit 1
        assert "***" in out
        _clean(out + err)


def test_where_names_the_schema_of_a_search_path_and_never_a_password() -> None:
    """Hosts that share one database keep each catalog in a schema of its own: a message
    names which one (`where`), still without the user's password."""
    url = f"postgresql://ann:{PW}@127.0.0.1:5432/test?options=-csearch_path%3Dlab_a"
    assert where(url) == "127.0.0.1:5432/test (search_path lab_a)"
    spaced = "postgresql://127.0.0.1/test?options=-c%20search_path%3Dlab_b%20-cwork_mem%3D4MB"
    assert where(spaced) == "127.0.0.1:5432/test (search_path lab_b)"
    assert where("postgresql://127.0.0.1:5432/test") == "127.0.0.1:5432/test"
    # Several hosts (libpq tries each): each with its own port, or the one port of all.
    assert where("postgresql://a:5999,b:5998/test") == "a:5999,b:5998/test"
    assert where("postgresql://a,b:5433/test") == "a:5432,b:5433/test"
    assert where("postgresql://a,b/test?port=5433") == "a:5433,b:5433/test"


def test_an_outdated_stores_command_names_its_url_masked_and_says_so() -> None:
    from tether.storage._pg_schema import outdated

    plain = str(outdated("catalog", 1, "db:5432/app", "postgresql://db/app?options=-cx%3Dy"))
    assert "`tether db upgrade 'postgresql://db/app?options=-cx%3Dy'`" in plain
    assert "masked" not in plain
    secret = str(outdated("world", 1, "db:5432/app", f"postgresql://ann:{PW}@db/app"))
    assert PW not in secret and "`tether db upgrade 'postgresql://ann:***@db/app'`" in (secret)
    assert "password masked here: give it by PGPASSWORD or a password file" in secret
