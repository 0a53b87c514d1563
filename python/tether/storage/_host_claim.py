"""A robot host's name on a shared PostgreSQL catalog, held by one `tether serve` at a time.

Device work is admitted bound to a host's name (`[serve] host_name`, by default the machine's
hostname) and claimed only by that host. Two daemons under one name on one catalog would
both claim the other's device work and drive their own robot of that name with it, so the
second is refused at start-up (`host_name_taken`, naming the holder's address and process)
until the first is gone.

Rules:
- The claim is a session-level advisory lock, keyed by the catalog's schema and the name,
  on a connection of its own held for the daemon's life. A process that dies releases it
  with its connection; one cut off from the server releases it when the server's keepalive
  gives the session up (about 25 s, `tether.storage._pg`'s session settings).
- A claim whose connection broke is taken again (every `CHECK_S`): the name is the daemon's
  again, or, when another daemon took it during the outage, an error is logged naming both and
  the owner's `on_lost` is called (`tether serve` then stops, safe-stopping its devices: two
  daemons must not claim one name's device work). The catalog's fences still keep every
  record single-writer; this catches a misconfiguration, it is not a fence.
- On SQLite the catalog is one host's file: there is nothing to claim.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable
from typing import Any, Final

import psycopg

from tether._coded import CodedError
from tether._core import CatalogStorageError
from tether.storage._errors import NoSuchSchema, SchemaDenied
from tether.storage._pg import connect, one_line, where
from tether.storage._pg_schema import check_search_path
from tether.storage._urls import postgres_url

log = logging.getLogger("tether.storage.host_claim")

#: How often a claim checks its connection, and takes the name again after it broke (s).
CHECK_S: Final = 10.0

_KEY: Final = "SELECT hashtextextended('tether.host_name:' || current_schema() || ':' || %s, 0)"


class HostNameTaken(CodedError):
    """Another live `tether serve` holds this host name on the catalog (`host_name_taken`)."""


def is_shared(url: str | None) -> bool:
    """Whether a store URL names a PostgreSQL store (one that hosts share; any case)."""
    return postgres_url(url) is not None


class HostClaim:
    """This daemon's hold of its host name on a PostgreSQL catalog (`take`, then `close`)."""

    def __init__(self, conninfo: str, host_name: str) -> None:
        self.conninfo = conninfo
        self.host_name = host_name
        self._nonce = secrets.token_hex(4)
        self._conn: psycopg.Connection[Any] | None = None
        self._closing = threading.Event()
        self._lock = threading.Lock()  # `_conn` against `close` (a reconnect takes a while)
        self._thread: threading.Thread | None = None
        #: Called (once, from the watcher) when another daemon took the name while this one's
        #: connection was broken; without it, the loss is logged at every check.
        self.on_lost: Callable[[HostNameTaken], None] | None = None

    @classmethod
    def take(
        cls,
        conninfo: str,
        host_name: str,
        *,
        on_lost: Callable[[HostNameTaken], None] | None = None,
    ) -> HostClaim:
        """Hold `host_name` on the catalog at `conninfo`.

        Raises:
            HostNameTaken: another live daemon holds it.
            CatalogStorageError: the server cannot be reached (one line, no password).
        """
        claim = cls(conninfo, host_name)
        claim.on_lost = on_lost
        claim._conn = claim._hold()
        claim._thread = threading.Thread(target=claim._watch, name="tether-host-claim", daemon=True)
        claim._thread.start()
        return claim

    def _application(self) -> str:
        # The nonce tells this claim's own sessions from any other's (a pid is reused, and two
        # machines may run the same one), the name cut before it is.
        return f"tether serve pid {os.getpid()} {self._nonce} {self.host_name}"[:63]

    def _hold(self, *, again: bool = False) -> psycopg.Connection[Any]:
        """A connection holding the name's lock. ``again`` (after this daemon's connection
        broke): a lock still held by this claim's own earlier session (cut off from the
        server, which has not noticed yet) is this daemon's, not another's: that session is
        ended, and the lock taken."""
        conn = connect(self.conninfo, CatalogStorageError, application=self._application())
        held = False
        try:
            with conn.cursor() as cur:  # no schema, or one the role may not use: refused
                check_search_path(cur, where(self.conninfo))
            take = f"SELECT pg_try_advisory_lock(({_KEY})), ({_KEY})"
            row = conn.execute(take, (self.host_name, self.host_name)).fetchone()
            assert row is not None
            if row[0]:
                held = True
                return conn
            holder, pid, application = self._holder(conn, int(row[1]))
            if again and pid is not None and application == self._application():
                conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
                row = conn.execute(take, (self.host_name, self.host_name)).fetchone()
                assert row is not None
                if row[0]:
                    held = True
                    log.warning(
                        "host name %r: this daemon's own earlier session still held it; that"
                        " session was ended",
                        self.host_name,
                    )
                    return conn
                holder, _, _ = self._holder(conn, int(row[1]))
        except psycopg.Error as exc:
            raise CatalogStorageError(
                f"cannot claim host name {self.host_name!r} on PostgreSQL at "
                f"{where(self.conninfo)}: {one_line(exc)}"
            ) from None
        finally:
            if not held:
                conn.close()
        raise HostNameTaken(
            "host_name_taken",
            f"host name {self.host_name!r} is held on the catalog at {where(self.conninfo)} by"
            f" another tether serve ({holder}): give each host its own [serve] host_name; a"
            " holder that is gone lets go when its connection ends (within about 25 s)",
            details={"host_name": self.host_name, "holder": holder},
        )

    @staticmethod
    def _holder(conn: psycopg.Connection[Any], key: int) -> tuple[str, int | None, str | None]:
        """Who holds the advisory lock `key`, in words (its client's address and application
        name), with its session's pid and application name (None: no holder found)."""
        row = conn.execute(
            "SELECT a.client_addr::text, a.application_name, a.pid FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = ((%s::bigint >> 32) & 4294967295)::oid"
            " AND l.objid = (%s::bigint & 4294967295)::oid LIMIT 1",
            (key, key),
        ).fetchone()
        if row is None:
            return "a session that has just ended", None, None
        address, application, pid = row
        words = f"{application or 'a client'} from {address or 'a local socket'}"
        return words, int(pid), application

    def _watch(self) -> None:
        while not self._closing.wait(CHECK_S):
            conn = self._conn
            try:
                if conn is None:
                    raise psycopg.OperationalError("no connection")
                conn.execute("SELECT 1")
                continue
            except psycopg.Error:
                pass
            if conn is not None:
                conn.close()
            self._conn = None
            try:
                fresh = self._hold(again=True)
                with self._lock:
                    if self._closing.is_set():  # closed while it reconnected: let go
                        fresh.close()
                        return
                    self._conn = fresh
                log.warning("host name %r claimed again after its connection broke", self.host_name)
            except HostNameTaken as exc:
                log.error("%s (taken while this daemon's connection was broken)", exc.message)
                if self.on_lost is not None:  # the owner stops: two would drive one name's work
                    self.on_lost(exc)
                    return
            except (CatalogStorageError, NoSuchSchema, SchemaDenied) as exc:
                log.warning("host name %r not claimed again yet: %s", self.host_name, exc)

    def close(self) -> None:
        """Let the name go (its connection closes; a reconnect still under way closes its
        own when it ends)."""
        with self._lock:
            self._closing.set()
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if self._thread is not None:
            self._thread.join(5.0)


__all__ = ["CHECK_S", "HostClaim", "HostNameTaken", "is_shared"]
