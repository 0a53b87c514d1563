"""`PostgresDoorbell`: wakes idle loops on every host when a PostgreSQL catalog commit changes
what they wait for, through LISTEN/NOTIFY.

The same shape as the data-dir doorbell of SQLite catalogs (`mark`, `wait`, `poke`, `ring`,
`listen`, `unlisten`; topics `CLAIMABLE`, `RESULT`, `SETTLED`), so a runtime loop waits on
either without knowing the backend. The difference is who rings: the PostgreSQL store sends
`pg_notify(channel, topics)` inside the very transaction that changes the core's columns, so a
wake is delivered exactly when the commit lands, to every listening process on every host,
and a commit that rolled back wakes nobody. `ring` exists for callers that ring after a
commit themselves; it also wakes this process at once.

A notification's payload is its topics (`1`, `2`, `4` or their sum); one that follows an
admission may also announce it (`topics|boot|ms|wall|values`, see `ANNOUNCED`), which the
doorbell keeps for a claim to check (`take_announced`). Anyone who may connect may notify,
so no payload is trusted or stops the listener: at worst it wakes the topics it names.

The channel is per schema (`tether_catalog:<schema>`, `channel_name`), so catalogs in
different schemas of one database do not wake each other. A listener holds one connection of
its own. If that connection breaks, it reconnects (every `RECONNECT_S`) and then wakes every
topic, because a notification sent while it was away is lost (so does a first connection that
failed: callers scanned on their own meanwhile). Waiters keep a fallback poll of at least 1 s
(`MIN_FALLBACK_S`) for what no notification announces: a lease or a backoff running out.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

import orjson
import psycopg
from psycopg import sql

from tether._core import CatalogStorageError
from tether.storage._doorbell import _ALL, CLAIMABLE, RESULT, SETTLED, TopicWaits
from tether.storage._pg import connect

log = logging.getLogger("tether.storage.pg_doorbell")

#: The shortest fallback poll a waiter should use alongside the doorbell.
MIN_FALLBACK_S: Final = 1.0
RECONNECT_S: Final = 1.0
#: While the server stays unreachable, its outage is said again at most this often (s).
OUTAGE_LOG_S: Final = 60.0
CHANNEL_PREFIX: Final = "tether_catalog:"
#: The longest channel name the server takes (NAMEDATALEN - 1 bytes): `pg_notify` refuses a
#: longer one, and LISTEN would cut it short, so neither may see one.
CHANNEL_MAX_BYTES: Final = 63
#: The separator of a notification that announces admissions: ``topics|boot|ms|wall|rows``,
#: the admitting statement's clock reading and the JSON array of the admitted records'
#: unstamped values (`PostgresCatalogStore.admit_at`; a claim may take one of them in one
#: round trip). A plain notification is ``topics``.
ANNOUNCED: Final = "|"
#: At most this many announced admissions are kept (oldest dropped first).
ANNOUNCED_KEPT: Final = 256


def channel_name(schema: str) -> str:
    """The wake channel of the catalog in ``schema``: `CHANNEL_PREFIX` and the schema's name
    when that fits in `CHANNEL_MAX_BYTES`, else the prefix, the name cut short (at a
    character) and ``#`` and 16 hex digits of its SHA-256: one channel per schema either way."""
    channel = CHANNEL_PREFIX + schema
    if len(channel.encode()) <= CHANNEL_MAX_BYTES:
        return channel
    digest = "#" + hashlib.sha256(schema.encode()).hexdigest()[:16]
    room = CHANNEL_MAX_BYTES - len(CHANNEL_PREFIX) - len(digest)
    head = schema.encode()[:room].decode(errors="ignore")
    return CHANNEL_PREFIX + head + digest


def _one_line(exc: BaseException) -> str:
    """A driver's message (it may hold newlines and tabs) as one line."""
    return " ".join(str(exc).split())


def channel_for(conn: psycopg.Connection[Any]) -> str:
    """The wake channel of the catalog in ``conn``'s current schema (`channel_name`)."""
    row = conn.execute("SELECT current_schema()").fetchone()
    return channel_name(str(row[0] if row and row[0] else "public"))


class PostgresDoorbell(TopicWaits):
    """The wakeups of one PostgreSQL catalog (URL + schema) in this process. Shareable across
    threads; get it with `for_url` (one per catalog per process).

    Counters `received` and `reconnects` are there for tests and benchmarks.
    """

    _registry: ClassVar[weakref.WeakValueDictionary[str, PostgresDoorbell]] = (
        weakref.WeakValueDictionary()
    )
    _registry_lock = threading.Lock()

    def __init__(self, conninfo: str) -> None:
        super().__init__()
        self.conninfo = conninfo
        self._listeners = 0
        self._listen_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._sender: psycopg.Connection[Any] | None = None
        self.channel: str | None = None
        self.received = 0
        self.reconnects = 0
        #: Admissions announced by notifications (`_announce`): (received at, by this host's
        #: monotonic clock; the admitting statement's reading; the record's unstamped values).
        self._announced: deque[tuple[float, tuple[str, int, int], list[Any]]] = deque(
            maxlen=ANNOUNCED_KEPT
        )

    @classmethod
    def for_url(cls, conninfo: str) -> PostgresDoorbell:
        """This process's doorbell of the catalog at ``conninfo``."""
        with cls._registry_lock:
            bell = cls._registry.get(conninfo)
            if bell is None:
                bell = cls(conninfo)
                cls._registry[conninfo] = bell
            return bell

    def ring(self, topics: int, keys: Iterable[tuple[str, str, str]] = ()) -> None:
        """Wake this process's waiters of ``topics`` now, and every listener by NOTIFY (the
        store already notifies in its transactions; this is for rings after a commit)."""
        topics &= _ALL
        if not topics:
            return
        self._raise(topics)
        try:
            with self._listen_lock:
                if self._sender is None or self._sender.closed or self._sender.broken:
                    self._sender = connect(
                        self.conninfo, CatalogStorageError, application="tether-doorbell"
                    )
                    self.channel = self.channel or channel_for(self._sender)
                self._sender.execute("SELECT pg_notify(%s, %s)", (self.channel, str(topics)))
        except (psycopg.Error, CatalogStorageError) as e:  # a ring never fails the caller
            log.debug("doorbell ring failed: %s", e)

    # -- announced admissions -----------------------------------------------------------

    def _heard(self, payload: str) -> None:
        """One notification: wake its topics (every topic when they cannot be read), after
        keeping what it announced. Anyone who may connect may notify the channel, so nothing
        in a payload is trusted: what it announces is only a hint a claim checks on the
        server (`PostgresCatalogStore._claim_announced`), and no payload stops this loop."""
        topics, _, announced = payload.partition(ANNOUNCED)
        try:
            bits = int(topics) & _ALL
        except ValueError:
            bits = _ALL
        if announced:
            try:
                self._announce(announced)
            except Exception as e:  # a payload this process cannot read: the ring stands
                log.debug("doorbell: an announcement it cannot read (%s)", type(e).__name__)
        self._raise(bits)

    def _announce(self, text: str) -> None:
        """Keep what a notification announced: the admitting statement's reading and the
        values of the records it admitted (see `ANNOUNCED`)."""
        boot, ms, wall, rows = text.split(ANNOUNCED, 3)
        values = orjson.loads(rows)
        reading = (boot, int(ms), int(wall))
        if type(values) is not list or not all(type(row) is list for row in values):
            raise ValueError("announced values are not a list of rows")
        at = time.monotonic()
        with self._lock:
            for row in values:
                self._announced.append((at, reading, row))

    def take_announced(
        self, wanted: Callable[[list[Any]], bool], fresh_s: float
    ) -> tuple[tuple[str, int, int], list[Any]] | None:
        """The first announced admission ``wanted`` accepts that this process received at
        most ``fresh_s`` ago (by this host's monotonic clock), taken so no other caller here
        takes it: (the admitting statement's reading, the record's unstamped values), or
        None. Older ones are dropped."""
        oldest = time.monotonic() - fresh_s
        with self._lock:
            kept = self._announced
            while kept and kept[0][0] < oldest:
                kept.popleft()
            for i, (_, reading, row) in enumerate(kept):
                if wanted(row):
                    del kept[i]
                    return reading, row
        return None

    # -- listening ----------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def listen(self) -> None:
        """Receive every process's rings (counted: `unlisten` once per call)."""
        ready: threading.Event | None = None
        with self._listen_lock:
            self._listeners += 1
            if self._thread is None:
                self._stop.clear()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._receive, args=(ready,), name="tether-pg-doorbell", daemon=True
                )
                self._thread.start()
        if ready is not None:  # LISTEN is in place before the caller's first scan
            ready.wait(10)

    def unlisten(self) -> None:
        """Stop receiving once every `listen` was matched."""
        with self._listen_lock:
            self._listeners = max(0, self._listeners - 1)
            if self._listeners:
                return
            thread, self._thread = self._thread, None
            self._stop.set()
            if self._sender is not None:
                self._sender.close()
                self._sender = None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def repair(self) -> bool:
        """Nothing to repair: a lost LISTEN connection reconnects on its own (and then wakes
        every topic). Always False."""
        return False

    def _receive(self, ready: threading.Event) -> None:
        # Whether a notification may have been missed since the last LISTEN (or since
        # `listen` returned: a first attempt that failed lets the callers scan on their own):
        # the next LISTEN then wakes every topic.
        missed = False
        # An outage is said once when it starts (and at most every `OUTAGE_LOG_S` while it
        # lasts, with its length), and once when listening works again: a server that is down
        # fails every reconnect, each `RECONNECT_S`.
        down_since: float | None = None
        said_at = 0.0
        while not self._stop.is_set():
            try:
                conn = connect(self.conninfo, CatalogStorageError, application="tether-doorbell")
            except CatalogStorageError as e:
                now = time.monotonic()
                if down_since is None or now - said_at >= OUTAGE_LOG_S:
                    lasted = "" if down_since is None else f" for {now - down_since:.0f} s"
                    log.warning(
                        "doorbell cannot listen%s (%s); waiters fall back to their poll",
                        lasted,
                        _one_line(e),
                    )
                    said_at = now
                    down_since = now if down_since is None else down_since
                missed = True
                ready.set()
                self._stop.wait(RECONNECT_S)
                continue
            try:
                channel = self.channel = self.channel or channel_for(conn)
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                ready.set()
                if missed:
                    self.reconnects += 1
                    self._raise(_ALL)  # what was sent while away is lost: everyone re-checks
                    away = (
                        ""
                        if down_since is None
                        else f" after {time.monotonic() - down_since:.0f} s"
                    )
                    log.info("doorbell listening again%s", away)
                missed = False
                down_since = None
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        self.received += 1
                        self._heard(note.payload)
            except psycopg.Error as e:
                log.info("doorbell connection lost (%s); reconnecting", _one_line(e))
                missed = True
                down_since = down_since or time.monotonic()
                said_at = time.monotonic()
                ready.set()
                self._stop.wait(RECONNECT_S)
            finally:
                conn.close()


__all__ = [
    "CLAIMABLE",
    "MIN_FALLBACK_S",
    "RESULT",
    "SETTLED",
    "PostgresDoorbell",
    "channel_for",
    "channel_name",
]
