"""PostgreSQL plumbing shared by the catalog store and the world ledger: connect, session
settings, typed errors, and the transaction that tells a lost COMMIT from a failed one.

Every connection this module opens:
- runs with `synchronous_commit = on`, forced per session and checked after (a role or a URL
  asking for `off` does not get it: an acknowledged commit is flushed on the server);
- has `statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout` set, so a
  client that vanishes mid-transaction (a cut cable, a SIGSTOP) holds no row lock for longer
  than the idle timeout, and a statement never waits for a lock for ever;
- uses TCP keepalives on both ends, so a dead peer is noticed in seconds, not hours, and a
  TCP user timeout, so a request sent into a cut link fails within `TCP_USER_TIMEOUT_MS`.

It also runs at READ COMMITTED (`default_transaction_isolation`, forced per session: the
stores' writers rely on it, and a role, database or URL default of REPEATABLE READ or
SERIALIZABLE would fail concurrent writers with serialization errors), and speaks UTF-8
(`client_encoding`, whatever the URL or the role asks).

Credentials never travel in messages: errors name the host, port and database and libpq's
cause (any password of the URL scrubbed out of it, `scrub`), never the URL. A connection that
fails carries a stable `code` (`connect_failure`): `unreachable`, `login_refused`,
`no_such_database` or `bad_url`, so every command exits with the same code for it. A URL libpq would
misread (an ``@`` or ``/`` in its password, not percent-encoded: parts of the password would
become the host or database) is refused before anything reads it. Put the password in the
environment (`PGPASSWORD`) or a libpq password file (`PGPASSFILE`, or `passfile=` in the
URL), not in the URL itself.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar, cast
from urllib.parse import urlsplit

import psycopg
from psycopg import conninfo as _conninfo
from psycopg import errors as _errors
from psycopg import generators as _generators
from psycopg.adapt import Transformer

from tether.storage._errors import with_code
from tether.storage._urls import ambiguous, scrub
from tether.storage._urls import redact as redact

#: Session settings every Tether connection runs with (milliseconds).
STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION_TIMEOUT_MS = 15_000
#: The idle-in-transaction timeout of a claim's transaction, open only while the client's
#: core decides on the rows it locked (`Session.exchange`): a claimant stopped there releases
#: them (its session ends) after this long, and other claimants skip them until then.
CLAIM_IDLE_TIMEOUT_MS = 5_000
CONNECT_TIMEOUT_S = 10
#: How long sent data may stay unacknowledged before the connection is declared dead (ms).
TCP_USER_TIMEOUT_MS = 30_000
#: synchronous_commit values that flush the commit on this server before acknowledging it.
DURABLE_COMMIT = frozenset({"on", "remote_write", "remote_apply"})
#: Why a URL libpq would misread is refused (`ambiguous`): it names no part of the URL.
AMBIGUOUS_URL = (
    "invalid PostgreSQL URL: an '@' or '/' in the password must be percent-encoded"
    " (%40, %2F), and so must an '@' after it"
)

#: The failures of a connection, by libpq's (and the server's) words for them; any other is
#: `unreachable`. The server's words are in its `lc_messages` language: these are English's,
#: and a refusal in another language is `unreachable`.
#: - `login_refused`: the server was reached and refused the login (a password, a role, its
#:   pg_hba.conf): the command ran and was refused (`tether._exit.FAILED`);
#: - `no_such_database`: the URL names a database the server does not have (`USAGE`);
#: - `bad_url`: a URL libpq or the server cannot take (an option's value, an unknown service or
#:   setting) (`USAGE`).
_CONNECT_FAILURES = (
    (
        "login_refused",
        re.compile(
            r"authentication failed|no password supplied|password is required"
            r'|role ".*" does not exist|no pg_hba\.conf entry|pg_hba\.conf rejects'
            r"|not permitted to log in|has no password assigned|permission denied for database"
        ),
    ),
    ("no_such_database", re.compile(r'database ".*" does not exist')),
    # A server that did not answer at all: the driver reports a Unix socket's refusal at once
    # ("connection is bad: ..."), which is not a fault of the URL.
    ("unreachable", re.compile(r"connection to server (?:on socket|at) .* failed: (?!FATAL)")),
    (
        "bad_url",
        re.compile(
            r"^connection is bad: |invalid port number|invalid integer value|invalid \w+ value"
            r"|invalid value for parameter|bad value for|unrecognized configuration parameter"
            r"|invalid connection option|definition of service"
        ),
    ),
)

E = TypeVar("E", bound=Exception)
T = TypeVar("T")
_IDLE = psycopg.pq.TransactionStatus.IDLE
_ROWS = psycopg.pq.ExecStatus.TUPLES_OK
_FAILED = psycopg.pq.ExecStatus.FATAL_ERROR
_PREPARABLE = frozenset({"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "VALUES"})
_CLAIM_IDLE = f"SET LOCAL idle_in_transaction_session_timeout = {CLAIM_IDLE_TIMEOUT_MS}"


def _literal(value: Any) -> str | None:
    """An ``EXECUTE`` argument as an SQL literal, for the types the stores pass (text,
    integers, booleans, NULL, arrays of text): the same values the driver's client-side
    binding writes, a sixth of its cost per statement; None for anything else (the driver
    renders those). A text holding a backslash is an escape string (``E'...'``, backslashes
    doubled), any other a standard one: quotes doubled in both, so either reads right
    whatever `standard_conforming_strings` says. A NUL, which no text may hold, is left to
    the driver (which refuses it)."""
    if value is None:
        return "NULL"
    kind = type(value)  # exactly these types: a subclass may render itself otherwise
    if kind is str:
        text = cast(str, value)
        if "\0" in text:
            return None
        if "\\" in text:
            return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
        return "'" + text.replace("'", "''") + "'"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is list and all(type(e) is str for e in value):
        inner = ",".join('"' + e.replace("\\", "\\\\").replace('"', '\\"') + '"' for e in value)
        return _literal("{" + inner + "}")
    return None


def _message(conn: psycopg.Connection[Any], texts: Sequence[str]) -> list[list[tuple[Any, ...]]]:
    """Send ``texts`` as one simple-protocol message and wait for every result; the rows of
    each statement that returned rows, typed by the driver's loaders. The first statement
    that failed raises its error (the server ran nothing after it); a connection lost on the
    way raises the driver's `OperationalError`, with no SQLSTATE.

    This is what a cursor's ``execute`` sends and receives, without its per-call machinery
    (its prepared-statement bookkeeping, result sets kept for ``nextset``): two of these are
    on the path from an admission to its claim."""
    with conn.lock:
        pgconn = conn.pgconn
        pgconn.send_query("; ".join(texts).encode(conn.info.encoding))
        results = conn.wait(_generators.execute(pgconn))
    rows: list[list[tuple[Any, ...]]] = []
    loader: Any = None  # a Transformer (the driver's C one: not usable as a type)
    for i, res in enumerate(results):
        if res.status == _ROWS:
            if loader is None:
                loader = Transformer(conn)
            loader.set_pgresult(res)
            rows.append(loader.load_rows(0, res.ntuples, tuple))
        elif res.status == _FAILED:
            error = _errors.error_from_result(res, encoding=conn.info.encoding)
            error.add_note(f"{_FAILED_AT}{i}")  # which statement of the message (`_first`)
            raise error
    return rows


_FAILED_AT = "tether: failed at statement "
#: A session the server ended (an administrator's `pg_terminate_backend`, a restart, an idle
#: session killer): its SQLSTATE, the server's own answer.
_SESSION_ENDED = frozenset({"57P01", "57P02", "57P03"})


def _ended_before_any(e: BaseException, conn: psycopg.Connection[Any]) -> bool:
    """Whether ``e`` is the server's answer that it had ended the session before the first
    statement of a message ran (`_SESSION_ENDED`, on that first statement, the connection now
    closed): nothing of the message ran, so sending it again on a fresh connection is sending
    it once."""
    return (
        isinstance(e, psycopg.Error)
        and (e.sqlstate or "") in _SESSION_ENDED
        and f"{_FAILED_AT}0" in getattr(e, "__notes__", ())
        and (conn.broken or conn.closed)
    )


def _parse(conninfo: str) -> dict[str, Any]:
    """libpq's parameters of ``conninfo``.

    Raises:
        ValueError: a URL libpq would misread (`ambiguous`), or one it cannot parse: one line
            without the URL's passwords (`scrub`).
    """
    if ambiguous(conninfo):
        raise ValueError(AMBIGUOUS_URL)
    try:
        return _conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as e:
        cause = scrub(one_line(e), conninfo)
        raise ValueError(f"invalid PostgreSQL URL{_rough_where(conninfo)}: {cause}") from None
    except UnicodeDecodeError:
        raise ValueError(
            f"invalid PostgreSQL URL{_rough_where(conninfo)}: a percent-encoded value is not UTF-8"
        ) from None


def _rough_where(conninfo: str) -> str:
    """`` for HOST:PORT/DB`` of a URL libpq refused, as far as its plain parts tell (never a
    user or password), or ``""``: the refusal still names the server it was meant for."""
    try:
        # Of the URL with its passwords masked: an unencoded `#` or `?` in a password would
        # otherwise cut the split inside it, and a piece of it would be shown as the host.
        parts = urlsplit(redact(conninfo))
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            return ""
        hosts = parts.netloc.rpartition("@")[2]
    except ValueError:
        return ""
    if not hosts or "%" in hosts or "*" in hosts:
        return ""
    db = parts.path.lstrip("/")
    return f" for {hosts}/{db}" if db and "%" not in db else f" for {hosts}"


def where(conninfo: str) -> str:
    """``host:port/dbname`` of a connection string, without user or password (and without
    any text of a URL libpq would misread)."""
    if ambiguous(conninfo):
        return "an ambiguous PostgreSQL URL"
    try:
        params = _parse(conninfo)
    except ValueError:
        return "an unparsable PostgreSQL URL"
    hosts = str(params.get("host") or params.get("hostaddr") or "localhost (socket)").split(",")
    ports = [p or "5432" for p in str(params.get("port") or "").split(",")]
    if len(ports) == 1:  # one port for every host (libpq's rule), else one each
        ports *= len(hosts)
    servers = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=False))
    db = str(params.get("dbname") or params.get("user") or "")
    path = _SEARCH_PATH.search(str(params.get("options") or ""))
    schema = f" (search_path {path.group(1)})" if path else ""  # several schemas, one database
    return scrub(f"{servers}/{db}{schema}", conninfo)


#: A search path set in libpq's ``options`` (``-csearch_path=X`` or ``-c search_path=X``).
_SEARCH_PATH = re.compile(r"-c\s*search_path\s*=\s*([^\s]+)")


def one_line(error: BaseException) -> str:
    """The first non-empty line of a driver error, without libpq's prefixes."""
    for line in str(error).splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("connection failed: ")
    return type(error).__name__


def connect_failure(cause: str) -> str:
    """The stable code of a connection that failed with libpq's ``cause`` (`one_line`):
    `login_refused`, `no_such_database`, `bad_url`, else `unreachable`."""
    for code, words in _CONNECT_FAILURES:
        if words.search(cause):
            return code
    return "unreachable"


#: How the driver lists every host's failure of a URL naming several hosts, after the last
#: one's (which alone would hide, say, a refused password behind a standby that is down).
_ATTEMPTS = "Multiple connection attempts failed. All failures were:"
#: A listed failure: the attempt (its host and port as the driver writes them), then its
#: words, libpq's (after "connection failed: ") or the driver's own (a timeout).
_ATTEMPT_CAUSE = re.compile(
    r"^- host: '([^']*)', port: '([^']*)'(?:, hostaddr: '[^']*')?: (?:connection failed: )?(.*)$"
)
#: A failure's code ranks the server's own answer (a refused login, a missing database) over
#: a host that did not answer: the answer is what the operator has to fix.
_RANK = ("login_refused", "no_such_database", "bad_url", "unreachable")


def connect_causes(error: BaseException) -> tuple[str, str]:
    """(code, cause) of a failed connection: `connect_failure` of `one_line`; with several
    hosts, each host's cause on one line (``; ``-joined, in the order tried), under the code
    of the most telling of them (`_RANK`)."""
    text = str(error)
    _, marker, rest = text.partition(_ATTEMPTS)
    if not marker:
        cause = one_line(error)
        return connect_failure(cause), cause
    causes = []
    for m in filter(None, map(_ATTEMPT_CAUSE.match, rest.splitlines())):
        host, port, words = m.group(1), m.group(2), m.group(3).strip()
        # libpq's words name the server; the driver's own (a timeout) do not.
        causes.append(words if "connection to server" in words else f"{host}:{port}: {words}")
    if not causes:
        cause = one_line(error)
        return connect_failure(cause), cause
    codes = [connect_failure(c) for c in causes]
    code = min(codes, key=lambda c: _RANK.index(c) if c in _RANK else len(_RANK))
    return code, "; ".join(causes)


def _ignored_passfile(params: dict[str, Any]) -> str:
    """Why libpq may have found no password: the password file it reads (``passfile``,
    ``PGPASSFILE``, else ``~/.pgpass``) exists but is readable by others, which libpq ignores
    with a warning of its own on stderr. Words to append to the cause, or ``""``."""
    named = params.get("passfile") or os.environ.get("PGPASSFILE")
    try:
        path = Path(named).expanduser() if named else Path.home() / ".pgpass"
        mode = path.stat().st_mode
    except (OSError, RuntimeError):  # no such file; no home directory to tell (a service)
        return ""
    if not stat.S_ISREG(mode) or not mode & 0o077:
        return ""
    return (
        f" (the password file {path} was ignored: its mode {stat.S_IMODE(mode):04o} lets others"
        f" read it; chmod 600 {path})"
    )


def check_url(conninfo: str, error: Callable[[str], E]) -> None:
    """Raise ``error`` (one line, no credentials, code `bad_url`) unless libpq can parse
    ``conninfo`` as its writer meant (`ambiguous`)."""
    try:
        _parse(conninfo)
    except ValueError as e:
        raise with_code(error(str(e)), "bad_url") from None


#: The stable code of a statement's failure, by the server's SQLSTATE (`Session._failed`).
SQLSTATE_CODES: Final = {
    "42501": "schema_denied",  # insufficient_privilege: the role may not use the stores
    "42P01": "store_damaged",  # undefined_table: a store's table is not there
    "42703": "store_damaged",  # undefined_column: a table under a store's name is another's
    "42P07": "store_damaged",  # duplicate_table: one not made by Tether takes a store's name
    "42804": "store_damaged",  # datatype_mismatch: likewise
    "57P01": "unreachable",  # admin_shutdown: the server is going away
    "57P02": "unreachable",  # crash_shutdown
    "57P03": "unreachable",  # cannot_connect_now: starting up or shutting down
}

#: The store each of Tether's sessions serves (its `application_name`), as an error names it:
#: with the catalog and the world ledger on one server, a refusal says which one failed.
STORE_OF: dict[str, str] = {
    "tether-catalog": "the catalog",
    "tether-doorbell": "the catalog",
    "tether-artifacts": "the catalog",
    "tether-world": "the world ledger",
}


#: libpq's `target_session_attrs` that ask for a session which cannot write (a standby, or a
#: read-only one); `prefer-standby` too, which takes a standby whenever one answers.
_READ_ONLY_TARGETS = frozenset({"read-only", "standby", "prefer-standby"})


def connect(
    conninfo: str, error: Callable[[str], E], *, application: str
) -> psycopg.Connection[Any]:
    """Open one autocommit connection with Tether's session settings.

    Raises:
        E (from ``error``): a bad URL, an unreachable server, a refused login, or a server that
            cannot keep `synchronous_commit` on. One line naming the host and the cause, without
            the URL's passwords; a connection that failed carries its `code`
            (`connect_failure`; `bad_url` for a URL that cannot be parsed).
    """
    at = where(conninfo)
    # The host claim's session (`tether serve HOST pid N`) holds the catalog's host row.
    store = STORE_OF.get(
        application, "the catalog" if application.startswith("tether serve ") else None
    )
    if store is not None:
        at = f"{at} ({store})"
    try:
        params = _parse(conninfo)
    except ValueError as e:
        raise with_code(error(str(e)), "bad_url") from None
    wanted = str(params.get("target_session_attrs") or os.environ.get("PGTARGETSESSIONATTRS") or "")
    if wanted in _READ_ONLY_TARGETS:  # a store writes: such a session could never serve it
        raise with_code(
            error(
                f"PostgreSQL at {at}: target_session_attrs={wanted} asks for a session that"
                " cannot write, and a store writes: use read-write (or leave it out)"
            ),
            "bad_url",
        ) from None
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", application)
    params.setdefault("keepalives", 1)
    params.setdefault("keepalives_idle", 10)
    params.setdefault("keepalives_interval", 5)
    params.setdefault("keepalives_count", 3)
    # Keepalives probe an idle connection only; data sent into a cut link would otherwise be
    # retransmitted for ~15 minutes before the call fails. This bounds that wait.
    params.setdefault("tcp_user_timeout", TCP_USER_TIMEOUT_MS)
    params["client_encoding"] = "UTF8"  # what `_message` encodes with: any text, any role
    ignored = "" if params.get("password") else _ignored_passfile(params)
    if ignored:
        # libpq would ignore it too, with a warning of its own on stderr beside this one's
        # line: it is given a file that is not there instead, and the refusal says why.
        params["passfile"] = os.path.join(os.sep, "nonexistent", "tether-ignored-passfile")
    try:
        conn = psycopg.connect(_conninfo.make_conninfo("", **params), autocommit=True)
    except psycopg.Error as e:
        # libpq's message names the cause (refused, timeout, password authentication failed,
        # database does not exist); `from None`: the chained error could carry the URL.
        code, cause = connect_causes(e)
        if "no password supplied" in cause:
            cause += ignored
        failed = error(f"cannot connect to PostgreSQL at {at}: {scrub(cause, conninfo)}")
        raise with_code(failed, code) from None
    try:
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false),"
            " set_config('lock_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', %s, false),"
            " set_config('tcp_keepalives_idle', '10', false),"
            " set_config('tcp_keepalives_interval', '5', false),"
            " set_config('tcp_keepalives_count', '3', false),"
            # Both stores' writers rely on READ COMMITTED (a row lock waits, then re-reads):
            # a default of REPEATABLE READ or SERIALIZABLE would fail them with 40001.
            " set_config('default_transaction_isolation', 'read committed', false),"
            # A store writes: a URL or role asking read-only transactions would fail every
            # claim and write after a start that looked fine.
            " set_config('default_transaction_read_only', 'off', false),"
            " set_config('client_encoding', 'UTF8', false)",
            (
                f"{STATEMENT_TIMEOUT_MS}ms",
                f"{LOCK_TIMEOUT_MS}ms",
                f"{IDLE_IN_TRANSACTION_TIMEOUT_MS}ms",
            ),
        )
        row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is None or row[0] not in DURABLE_COMMIT:
            conn.execute("SET synchronous_commit = on")
            row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is None or row[0] not in DURABLE_COMMIT:
            raise error(f"PostgreSQL at {at} will not keep synchronous_commit on ({row})")
    except psycopg.Error as e:
        conn.close()
        cause = scrub(one_line(e), conninfo)
        raise error(f"cannot prepare the PostgreSQL session at {at}: {cause}") from None
    except BaseException:
        conn.close()
        raise
    return conn


class Session:
    """One connection, reopened after it breaks. Single owner: callers serialise on a lock.

    Args:
        conninfo: the libpq connection string or URL.
        error: builds the backend's storage error from a message.
        unknown: builds the backend's commit-outcome-unknown error from a message.
        application: the `application_name` the server shows.
        settings: more session settings (name to value) for each connection it opens.
        on_connect: statements each connection it opens runs once, after ``settings`` (the
            session's constants: they die with it, and a reconnect runs them again).
        server_prepared: `exchange` sends each statement as an ``EXECUTE`` of a statement it
            prepared on the connection (`_executes`), and the driver prepares nothing of its
            own (its cache is dropped with ``DEALLOCATE ALL`` after any ``ROLLBACK``, which
            would take this session's statements with it).
    """

    def __init__(
        self,
        conninfo: str,
        error: Callable[[str], Exception],
        unknown: Callable[[str], Exception],
        *,
        application: str,
        settings: dict[str, str] | None = None,
        on_connect: Sequence[str] = (),
        server_prepared: bool = False,
    ) -> None:
        self.conninfo = conninfo
        self._server_prepared = server_prepared
        self.where = where(conninfo)
        self._error = error
        self._unknown = unknown
        self._application = application
        self._settings = dict(settings or {})
        self._on_connect = tuple(on_connect)
        self._mogrifier: psycopg.ClientCursor[Any] | None = None
        self._conn: psycopg.Connection[Any] | None = self._connect()
        #: `exchange`'s statements prepared on the current connection (SQL: statement name).
        self._named: dict[str, str] = {}
        self._names = 0
        #: Transactions this session sent COMMIT for, and the round trips of its `exchange`
        #: and `read` calls (benchmarks count both per job).
        self.commits = 0
        self.round_trips = 0

    def conn(self) -> psycopg.Connection[Any]:
        """The live connection, reconnecting if the last one broke."""
        c = self._conn
        if c is None or c.closed or c.broken:
            if c is not None:
                c.close()
            self._conn = None
            self._named.clear()  # prepared statements live and die with their session
            c = self._connect()
            self._conn = c
        return c

    def _executes(
        self, cur: psycopg.ClientCursor[Any], statements: Sequence[tuple[str, Any]]
    ) -> tuple[list[str], dict[str, str]]:
        """``statements`` as the texts of one simple-protocol message, each an ``EXECUTE``
        of a statement prepared on the server (parsed once per connection, not once per
        message; planned as the session's `plan_cache_mode` says), preceded by its
        ``PREPARE`` the first time; and the statements
        prepared here (SQL: name), to keep once the message ran. A message that failed may
        or may not have run its ``PREPARE``s: they are made again next time, under new names.
        Parameters are positional (``%s``); their types are the server's inference from the
        statement, as when the values are inlined in its text."""
        texts: list[str] = []
        fresh: dict[str, str] = {}
        if not self._server_prepared:
            return [cur.mogrify(q, p) for q, p in statements], fresh
        for q, p in statements:
            name = self._named.get(q) or fresh.get(q)
            if name is None and q.split(None, 1)[0].upper() not in _PREPARABLE:
                texts.append(cur.mogrify(q, p))  # EXPLAIN, SET, ...
                continue
            if name is None:
                self._names += 1
                name = fresh[q] = f"tether_{self._names}"
                if p is None:  # no parameters: the text as the driver would send it
                    texts.append(f"PREPARE {name} AS {q}")
                else:
                    parts = q.replace("%%", "\0").split("%s")
                    body = "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1))
                    texts.append(f"PREPARE {name} AS {(body + parts[-1]).replace(chr(0), '%')}")
            args = tuple(p or ())
            if not args:
                texts.append(f"EXECUTE {name}")
                continue
            literals = [_literal(a) for a in args]
            if None in literals:
                texts.append(cur.mogrify(f"EXECUTE {name}({', '.join(['%s'] * len(args))})", args))
            else:
                texts.append(f"EXECUTE {name}({', '.join(cast('list[str]', literals))})")
        return texts, fresh

    def _cursor(self, conn: psycopg.Connection[Any]) -> psycopg.ClientCursor[Any]:
        """A client-side-binding cursor of ``conn`` (`_executes` renders the values it
        cannot itself with its ``mogrify``), kept while the connection lives."""
        cur = self._mogrifier
        if cur is None or cur.connection is not conn:
            cur = self._mogrifier = psycopg.ClientCursor(conn)
        return cur

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self.conninfo, self._error, application=self._application)
        if self._server_prepared:
            conn.prepare_threshold = None
        try:
            for name, value in self._settings.items():
                conn.execute("SELECT set_config(%s, %s, false)", (name, value))
            for statement in self._on_connect:
                conn.execute(statement)
        except psycopg.Error as e:
            conn.close()
            raise self._error(f"cannot prepare the session at {self.where}: {one_line(e)}") from e
        return conn

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the current connection (tests terminate it)."""
        c = self._conn
        return None if c is None or c.closed else c.info.backend_pid

    @contextmanager
    def transaction(self, what: str, *, snapshot: bool = False) -> Iterator[psycopg.Cursor[Any]]:
        """BEGIN ... COMMIT. A failure before COMMIT rolls back (nothing was written); a COMMIT
        whose reply never came is raised as the ``unknown`` error: it may have landed.
        ``snapshot``: a read-only REPEATABLE READ transaction (one consistent view)."""
        conn = self.conn()
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if snapshot else "BEGIN")
        except psycopg.Error as e:
            raise self._error(
                f"cannot start a {what} transaction at {self.where}: {one_line(e)}"
            ) from e
        cur = conn.cursor()
        try:
            yield cur
        except BaseException as e:
            if not conn.broken and not conn.closed:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    conn.close()
            if isinstance(e, psycopg.Error):
                raise self._failed(what, e) from e
            raise
        try:
            self.commits += 1
            conn.execute("COMMIT")
        except psycopg.Error as e:
            if conn.broken or conn.closed:
                conn.close()
                raise self._unknown(
                    f"the {what} COMMIT at {self.where} got no reply ({one_line(e)}):"
                    " it may or may not have landed; re-read before any effect"
                ) from e
            raise self._error(f"{what} COMMIT failed at {self.where}: {one_line(e)}") from e

    def exchange(
        self,
        what: str,
        reads: Sequence[tuple[str, Any]],
        decide: Callable[[list[list[tuple[Any, ...]]]], tuple[Sequence[tuple[str, Any]], T]],
        *,
        lock: bool,
    ) -> T:
        """One read-decide-write transaction in two round trips, each sent as one message.

        ``lock``: the first round trip is one simple-protocol message, ``BEGIN`` and every
        statement of ``reads`` (row locks, the server clock), whose rows ``decide`` (the core's
        decisions) turns into the writes and the value to return; the second is one message,
        the writes and ``COMMIT`` (``ROLLBACK`` when there are none). The transaction stays
        open across ``decide`` only: ``CLAIM_IDLE_TIMEOUT_MS`` bounds how long a client that
        stops there (a SIGSTOP, a pause) holds the rows it locked.

        Not ``lock``: ``reads`` run on their own (one message), outside any transaction and
        locking nothing (the rows and the clock reading); the writes are one message,
        ``BEGIN``, the writes and ``COMMIT``, so no lock is held across any step of the
        client. The writes must guard what ``decide`` read (the version of each row): a guard
        that does not hold fails its statement (an error, never a silent no-op), and the
        transaction writes nothing.

        Why one message per round trip: the server runs a simple-protocol message only once it
        has all of it, and it arms its idle-in-transaction timeout each time it waits for the
        next one. Statements sent one by one (pipeline mode) and stopped before their Sync
        leave the server waiting mid-pipeline, holding their locks with neither the statement
        nor the idle timeout running: until the client resumes.

        Each statement of a message is an ``EXECUTE`` of a statement the server prepared on
        this connection (`_executes`; its ``PREPARE`` goes first in the message that first
        uses it), so the server parses each shape once per session, and a message is still
        one simple-protocol message.

        No writes: ``decide``'s value is returned (a ``lock`` transaction is rolled back).
        ``decide`` raising rolls back. A COMMIT whose reply never came is the ``unknown``
        error; any other failure raises the ``error`` one, chained to the driver's (its SQLSTATE
        class tells a caller to retry: a unique violation, a refused guard, a deadlock).
        """
        conn = self.conn()
        committing = False
        try:
            try:
                results = self._send(conn, ["BEGIN", _CLAIM_IDLE] if lock else [], reads, [])
            except psycopg.Error:
                if not (conn.broken or conn.closed):
                    raise
                # The session was gone (a terminated backend, a server restarted since): its
                # reads wrote nothing, so they are sent again, once, on a fresh connection.
                conn.close()
                conn = self.conn()
                results = self._send(conn, ["BEGIN", _CLAIM_IDLE] if lock else [], reads, [])
            self.round_trips += 1 + bool(lock)  # the reads, and the writes (or the rollback)
            writes, value = decide(results)
            if not writes:
                if lock:
                    conn.execute("ROLLBACK")
                return value
            committing = True  # from here on, a lost reply is an unknown outcome
            self.commits += 1
            self.round_trips += not lock
            self._send(conn, [] if lock else ["BEGIN"], writes, ["COMMIT"])
            return value
        except BaseException as e:
            self._fail(conn, e, what, committing=committing)

    def _send(
        self,
        conn: psycopg.Connection[Any],
        before: list[str],
        statements: Sequence[tuple[str, Any]],
        after: list[str],
    ) -> list[list[tuple[Any, ...]]]:
        """``statements`` (`_executes`) between ``before`` and ``after`` as one message
        (`_message`); the statements it prepared are kept once it ran."""
        texts, fresh = self._executes(self._cursor(conn), statements)
        rows = _message(conn, [*before, *texts, *after])
        self._named.update(fresh)
        return rows

    def _fail(
        self, conn: psycopg.Connection[Any], e: BaseException, what: str, *, committing: bool
    ) -> NoReturn:
        """Raise what a failed transaction raises, after its rollback: the ``unknown`` error
        for a COMMIT sent (``committing``) whose reply never came, the ``error`` one for any
        other driver failure (each chained to it), anything else as it is."""
        broken = conn.broken or conn.closed
        if not broken and conn.info.transaction_status != _IDLE:
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                conn.close()
        if not isinstance(e, psycopg.Error):
            raise e
        if broken:
            conn.close()
            # The server's error answer to the message (a terminated session's too) means it
            # ran none of it past the error, COMMIT included: definite.
            if committing and e.sqlstate is None:
                raise self._unknown(
                    f"the {what} COMMIT at {self.where} got no reply ({one_line(e)}):"
                    " it may or may not have landed; re-read before any effect"
                ) from e
        raise self._failed(what, e) from e

    def _failed(self, what: str, e: psycopg.Error) -> Exception:
        """The ``error`` of a statement the server refused, with the stable code its SQLSTATE
        names (`SQLSTATE_CODES`: a right the role lacks, a table a Tether store lacks or one
        of another program under a store's name), so each command says it as every other
        does; uncoded otherwise."""
        err = self._error(f"{what} failed at {self.where}: {one_line(e)}")
        code = SQLSTATE_CODES.get(e.sqlstate or "")
        return with_code(err, code) if code is not None else err

    def commit_message(
        self, what: str, statements: Sequence[tuple[str, Any]]
    ) -> list[list[tuple[Any, ...]]]:
        """One transaction in one round trip: one message, ``BEGIN``, ``statements`` and
        ``COMMIT``; the rows of each statement that returns rows. For writes that need no
        decision between their statements (each statement's own conditions decide). A
        failed statement runs nothing after it (the transaction rolls back); a COMMIT whose
        reply never came is the ``unknown`` error."""
        conn = self.conn()
        try:
            self.commits += 1
            self.round_trips += 1
            try:
                return self._send(conn, ["BEGIN"], statements, ["COMMIT"])
            except psycopg.Error as e:
                if not _ended_before_any(e, conn):
                    raise
                # The server had ended the session before it ran any of it (it answered so):
                # sent again, once, on a fresh connection.
                conn.close()
                conn = self.conn()
                return self._send(conn, ["BEGIN"], statements, ["COMMIT"])
        except BaseException as e:
            self._fail(conn, e, what, committing=True)

    def read(self, what: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """One autocommit read (of a statement prepared on the session, with
        ``server_prepared``)."""
        self.round_trips += 1
        for again in (False, True):
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = self.conn()
                if not self._server_prepared:
                    return conn.execute(sql, params).fetchall()
                rows = self._send(conn, [], [(sql, params)], [])
                return rows[0] if rows else []
            except psycopg.Error as e:
                if again or conn is None or not (conn.broken or conn.closed):
                    raise self._failed(what, e) from e
                # The session was gone (a terminated backend, a server restarted since): a
                # read has no effect, so it is sent again, once, on a fresh connection.
                conn.close()
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
