"""`Doorbell`: wakes idle loops when a catalog commit changes what they wait for, in this process
and in every other process on the host that has the same catalog file open.

A catalog rings its doorbell after a commit (see `tether.activities.Catalog`) with the topics
the core-computed columns changed: `CLAIMABLE` (an Activity became claimable, or earlier than
before), `RESULT` (a result is now pending observation), `SETTLED` (an Activity settled).

In one process every catalog connection to one file shares one `Doorbell`: a ring raises the
topic's counter and wakes the threads waiting on it. A loop reads the counter (`mark`) before
it scans the catalog and waits only while the counter still equals that mark, so a ring that
lands between its scan and its wait is never lost.

Across processes the doorbell is a directory beside the catalog file, `<catalog>-wakeup/`
(mode 0700). Each listening process binds one Unix datagram socket in it (`<pid>-<nonce>.sock`,
mode 0600) and runs a thread that turns datagrams into counter raises; a ring sends one byte
(the topic bits) to every other socket there, without blocking (the directory is listed at
most every `LISTING_TTL_S`; a new listener waits that long after binding, so every ring
after its `listen` returns reaches it):
- a full socket queue drops the byte: that process has unread wakeups, so it wakes anyway;
- a socket nobody is bound to (ECONNREFUSED: its process died) is stale and is removed;
- a listener whose socket file disappeared binds a new one when its loop next times out
  (`repair`).
A ring is best effort: a process that commits and dies before ringing, or a directory that
cannot be created, leaves the waiters to their fallback poll (>= 1 s, see
`tether.runtime.Wakeup`). Nothing here decides a rule or touches the database.

Which records got a result: a ring of this process names the keys whose rows became pending
observation (`ring(topics, keys)`); `results_since` answers them in order, so a reader that
waits for one record's result (a gRPC watch) re-reads only when its own key is named. It
answers None (every reader re-reads) when it cannot tell: a `RESULT` ring without keys (from
another process, or any PostgreSQL notification), or more keyed rings since the reader's mark
than are kept (`RESULT_KEYS_KEPT`).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Final, Protocol

from tether._core import catalog_columns

log = logging.getLogger("tether.storage.doorbell")

#: An Activity became claimable (or claimable earlier than before): workers wake.
CLAIMABLE: Final = 1
#: A result is now pending observation: the observer wakes.
RESULT: Final = 2
#: An Activity settled: `wait_settled` wakes.
SETTLED: Final = 4
TOPICS: Final = (CLAIMABLE, RESULT, SETTLED)
_ALL: Final = CLAIMABLE | RESULT | SETTLED

#: The byte a listener sends to probe whether a socket is stale: raises no counter.
_PROBE: Final = b"\x00"
_SUFFIX: Final = ".sock"
#: How long a ring reuses its listing of the directory (s). A new listener waits this long
#: after binding (`listen`), so every ring after it returns reaches it.
LISTING_TTL_S: Final = 0.02
#: Keys of this process's `RESULT` rings kept for `results_since` (then a reader re-reads).
RESULT_KEYS_KEPT: Final = 4096
# AF_UNIX paths hold at most 107 bytes; a longer one is reached through a directory fd.
_MAX_PATH: Final = 100


_COLUMNS: Final = tuple(catalog_columns())
_CLAIMABLE_FROM: Final = _COLUMNS.index("claimable_from_ms")
_PENDING: Final = _COLUMNS.index("pending_observation")
_UNSETTLED: Final = _COLUMNS.index("unsettled")


def changed_topics(old: tuple[Any, ...] | None, new: tuple[Any, ...]) -> int:
    """The topics a committed change of one row rings, read from the core-computed columns.

    `CLAIMABLE` when the row's claimable time appeared or moved earlier (a claim or a renewal
    only moves it later: a waiter's timer stays a lower bound, nobody needs waking); `RESULT`
    when the row became pending observation; `SETTLED` when it stopped being unsettled.
    """
    topics = 0
    at = new[_CLAIMABLE_FROM]
    if at is not None:
        before = None if old is None else old[_CLAIMABLE_FROM]
        if before is None or at < before:
            topics |= CLAIMABLE
    if new[_PENDING] and (old is None or not old[_PENDING]):
        topics |= RESULT
    if old is not None and old[_UNSETTLED] and not new[_UNSETTLED]:
        topics |= SETTLED
    return topics


def wakeup_dir_for(catalog_path: str | Path) -> Path:
    """The doorbell directory of the catalog file at ``catalog_path``."""
    return Path(f"{Path(catalog_path).resolve()}-wakeup")


class _Address:
    """Unix socket addresses inside one directory, even when its path is too long for one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def of(self, name: str) -> str:
        full = f"{self.directory}/{name}"
        if len(full.encode()) <= _MAX_PATH:
            return full
        if self._fd is None:  # kept open while the doorbell lives
            self._fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            weakref.finalize(self, os.close, self._fd)
        return f"/proc/self/fd/{self._fd}/{name}"


class WakeBell(Protocol):
    """What an idle loop waits on: a catalog's doorbell, whatever the backend (`Doorbell` for
    a catalog file, `PostgresDoorbell`'s LISTEN/NOTIFY for a PostgreSQL catalog)."""

    def mark(self, topic: int) -> int: ...

    def wait(
        self, topic: int, mark: int, timeout_s: float, stop: threading.Event | None = None
    ) -> bool: ...

    def poke(self) -> None: ...

    def ring(self, topics: int, keys: Iterable[tuple[str, str, str]] = ()) -> None: ...

    def results_since(self, mark: int) -> tuple[int, list[tuple[str, str, str]] | None]: ...

    def listen(self) -> None: ...

    def unlisten(self) -> None: ...

    def repair(self) -> bool: ...


class TopicWaits:
    """This process's side of a doorbell: one counter per topic and the threads waiting on it.
    A ring from anywhere (`_raise`) bumps the counters; `mark` then `wait` never misses one.
    Both the data-dir doorbell and the PostgreSQL one are built on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conds = {t: threading.Condition(self._lock) for t in TOPICS}
        self._counts = dict.fromkeys(TOPICS, 0)
        self._waiting = dict.fromkeys(TOPICS, 0)
        # Keys named by this process's RESULT rings, numbered; and the number of the last
        # RESULT ring that named none (after it, nobody can tell which keys it was for).
        self._result_keys: deque[tuple[int, tuple[str, str, str]]] = deque(maxlen=RESULT_KEYS_KEPT)
        self._result_seq = 0
        self._unkeyed_seq = 0

    def results_since(self, mark: int) -> tuple[int, list[tuple[str, str, str]] | None]:
        """(the feed's mark now, the keys given a result since `mark` in ring order), or None
        in place of the keys when it cannot tell (see the module docstring). Start with mark
        0 (the first answer may be None)."""
        with self._lock:
            now = self._result_seq
            if now == mark:
                return now, []
            oldest = self._result_keys[0][0] if self._result_keys else now + 1
            if self._unkeyed_seq > mark or oldest > mark + 1:
                return now, None
            return now, [key for seq, key in self._result_keys if seq > mark]

    def mark(self, topic: int) -> int:
        """The topic's counter now: read it before scanning, then `wait` with it."""
        with self._lock:
            return self._counts[topic]

    def wait(
        self, topic: int, mark: int, timeout_s: float, stop: threading.Event | None = None
    ) -> bool:
        """Wait until the topic rang since ``mark``, ``stop`` is set (see `poke`) or
        ``timeout_s`` passed; True if it rang."""
        deadline = time.monotonic() + timeout_s
        cond = self._conds[topic]
        with cond:
            self._waiting[topic] += 1
            try:
                while self._counts[topic] == mark:
                    if stop is not None and stop.is_set():
                        return False
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    cond.wait(remaining)
                return True
            finally:
                self._waiting[topic] -= 1

    def poke(self) -> None:
        """Wake every waiter of this process so it re-checks its stop event."""
        with self._lock:
            for cond in self._conds.values():
                cond.notify_all()

    def _raise(self, topics: int, keys: Iterable[tuple[str, str, str]] = ()) -> None:
        with self._lock:
            if topics & RESULT:
                named = False
                for key in keys:
                    named = True
                    self._result_seq += 1
                    self._result_keys.append((self._result_seq, key))
                if not named:
                    self._result_seq += 1
                    self._unkeyed_seq = self._result_seq
            for t in TOPICS:
                if topics & t:
                    self._counts[t] += 1
                    if self._waiting[t]:
                        self._conds[t].notify_all()


class Doorbell(TopicWaits):
    """The wakeups of one catalog file in this process. Shareable across threads.

    Get it with `Doorbell.for_catalog` (one per file per process). Counters (`rings`,
    `sent`, `received`, `stale_removed`) are there for tests and benchmarks.

    Args:
        directory: the doorbell directory (`wakeup_dir_for(catalog_path)`).
    """

    _registry: ClassVar[weakref.WeakValueDictionary[str, Doorbell]] = weakref.WeakValueDictionary()
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self._names: list[str] = []
        self._listed_at = -LISTING_TTL_S
        self._listeners = 0
        self._listen_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._name: str | None = None
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._sender: socket.socket | None = None
        self._address = _Address(directory)
        self.rings = 0
        self.sent = 0
        self.received = 0
        self.stale_removed = 0

    @classmethod
    def for_catalog(cls, catalog_path: str | Path) -> Doorbell:
        """This process's doorbell of the catalog file at ``catalog_path``."""
        directory = wakeup_dir_for(catalog_path)
        key = f"{os.getpid()}:{directory}"  # a forked child gets doorbells of its own
        with cls._registry_lock:
            bell = cls._registry.get(key)
            if bell is None:
                bell = cls(directory)
                cls._registry[key] = bell
            return bell

    # -- ringing ------------------------------------------------------------------------

    def ring(self, topics: int, keys: Iterable[tuple[str, str, str]] = ()) -> None:
        """Wake every other listening process, then this process's waiters of ``topics``
        (`keys`: the records a `RESULT` ring is for, see `results_since`)."""
        topics &= _ALL
        if not topics:
            return
        self.rings += 1
        # Other processes first: sending may release the GIL, and a thread of this process
        # woken before that could run ahead of the ringing thread's next statement (a crash
        # point right after the commit, in the crash matrix, must come first).
        self._send(bytes((topics,)))
        self._raise(topics, keys)

    def _send(self, payload: bytes) -> None:
        now = time.monotonic()
        if now - self._listed_at >= LISTING_TTL_S:
            try:
                self._names = [n for n in os.listdir(self.directory) if n.endswith(_SUFFIX)]
            except OSError:  # no directory: no process listens (or it cannot be read)
                self._names = []
            self._listed_at = now
        own = self._name
        for name in self._names:
            if name != own:
                self._send_to(name, payload)

    def _send_to(self, name: str, payload: bytes) -> None:
        try:
            sender = self._sender
            if sender is None:
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
                weakref.finalize(self, sender.close)  # kept while the doorbell lives
                self._sender = sender
            sender.sendto(payload, self._address.of(name))
            self.sent += 1
        except BlockingIOError:
            pass  # its queue is full: that process has wakeups to read already
        except ConnectionRefusedError:
            self._remove_stale(name)
        except OSError as e:  # removed meanwhile, or unusable: never fail the commit
            if not isinstance(e, FileNotFoundError):
                log.debug("doorbell %s: cannot ring %s: %s", self.directory, name, e)

    def _remove_stale(self, name: str) -> None:
        # Nobody is bound to it: the process that bound it is gone. A live listener unlinks
        # its own socket before closing it, so this never removes a live one.
        if name in self._names:
            self._names = [n for n in self._names if n != name]
        try:
            os.unlink(self.directory / name)
            self.stale_removed += 1
        except FileNotFoundError:
            pass
        except OSError as e:
            log.debug("doorbell %s: cannot remove stale %s: %s", self.directory, name, e)

    # -- listening ----------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        """Whether this process has a bound socket in the doorbell directory."""
        return self._sock is not None

    @property
    def socket_path(self) -> Path | None:
        """This process's socket file, while listening."""
        return None if self._name is None else self.directory / self._name

    def listen(self) -> None:
        """Receive other processes' rings (counted: `unlisten` once per call).

        If the directory or socket cannot be made, this process still wakes on its own
        rings and the waiters fall back to their poll; the failure is logged once.
        """
        with self._listen_lock:
            self._listeners += 1
            if self._sock is None and self._bind():
                time.sleep(LISTING_TTL_S)  # until every sender's listing includes this socket

    def unlisten(self) -> None:
        """Stop receiving once every `listen` was matched."""
        with self._listen_lock:
            self._listeners = max(0, self._listeners - 1)
            if self._listeners == 0:
                self._close_socket()

    def repair(self) -> bool:
        """Bind a new socket if this process's socket file was removed; True if it did."""
        with self._listen_lock:
            if self._listeners == 0:
                return False
            path = self.socket_path
            try:
                alive = path is not None and os.stat(path).st_ino == self._inode
            except OSError:
                alive = False
            if alive and self._sock is not None:
                return False
            self._close_socket()
            if not self._bind():
                return False
            time.sleep(LISTING_TTL_S)  # see `listen`
            return True

    def _prepare_directory(self) -> None:
        try:
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{self.directory} is not a directory")
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(self.directory, 0o700)  # a umask or a copy loosened it

    def _sweep(self) -> None:
        """Remove sockets of processes that died without removing theirs."""
        for name in os.listdir(self.directory):
            if name.endswith(_SUFFIX) and name != self._name:
                self._send_to(name, _PROBE)

    def _bind(self) -> bool:
        sock: socket.socket | None = None
        try:
            self._prepare_directory()
            self._sweep()
            name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}{_SUFFIX}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(self._address.of(name))
            path = self.directory / name
            os.chmod(path, 0o600)
            self._inode = os.stat(path).st_ino
        except OSError as e:
            if sock is not None:
                sock.close()
            log.warning(
                "doorbell %s unavailable (%s): other processes' commits wake this one only"
                " at its fallback poll",
                self.directory,
                e,
            )
            return False
        self._sock, self._name = sock, name
        thread = threading.Thread(
            target=self._receive, args=(sock,), name="tether-doorbell", daemon=True
        )
        self._thread = thread
        thread.start()
        return True

    def _receive(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(64)
            except OSError:
                return
            if sock is not self._sock:
                return  # closed or replaced: the new socket has its own thread
            topics = 0
            while True:
                topics |= data[0] if data else 0
                try:
                    data = sock.recv(64, socket.MSG_DONTWAIT)
                except (BlockingIOError, OSError):
                    break
            self.received += 1
            if topics & _ALL:
                self._raise(topics & _ALL)

    def _close_socket(self) -> None:
        sock, name, thread = self._sock, self._name, self._thread
        if sock is None or name is None:
            return
        self._sock, self._name, self._inode, self._thread = None, None, None, None
        try:
            os.unlink(self.directory / name)  # first: nobody may take it for a stale one
        except OSError:
            pass
        try:  # wakes the receiving thread (recv returns b""), which sees it was replaced
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        sock.close()
