"""Console sessions: who logged in, until when, and the CSRF token of each session.

Rules:
- A session is created only by a login with a named operator's own credential, verified by
  the daemon's `Authenticator` (role `operator`); the operator recorded by every decision made
  in it is that principal's name.
- The session id is 256 random bits, sent only in the cookie (HttpOnly, SameSite=Strict,
  `Path=/`, `Max-Age` = the lifetime, `Secure` with TLS). Only its SHA-256 is kept, so the
  table itself holds nothing that logs anyone in.
- Each session has its own CSRF token (256 random bits), given to the page in the login
  answer (and by `GET /api/session`): every state-changing request carries it in the
  `X-CSRF-Token` header, which a cross-site form cannot set. Compared in constant time.
- A session expires `lifetime_s` after the login (fixed, not sliding); an expired one is
  dropped when it is next looked at. At most `MAX_SESSIONS` live at once (the oldest is
  dropped first). Logout drops it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

COOKIE: Final = "tether_session"
MAX_SESSIONS: Final = 256


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    """One login: the operator, the CSRF token, when it started and expires (wall clock ms)."""

    operator: str
    csrf: str = field(repr=False)
    created_ms: int
    expires_ms: int

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf.encode(), str(token).encode())


class Sessions:
    """The live sessions of one console (thread-safe)."""

    def __init__(self, lifetime_s: float) -> None:
        self.lifetime_s = lifetime_s
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)

    def create(self, operator: str) -> tuple[str, Session]:
        """A new session for `operator`: (the session id for the cookie, the session)."""
        sid = secrets.token_urlsafe(32)
        now = self._now_ms()
        session = Session(
            operator, secrets.token_urlsafe(32), now, now + int(self.lifetime_s * 1000)
        )
        with self._lock:
            self._sessions[_digest(sid)] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        """The live session of `sid` (None: none, or expired)."""
        if not sid:
            return None
        key = _digest(sid)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if session.expires_ms <= self._now_ms():
                del self._sessions[key]
                return None
            return session

    def drop(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._sessions.pop(_digest(sid), None)

    def operator_of(self, sid: str | None) -> str | None:
        """The operator a live session belongs to (the `verify_credential` of a decision)."""
        session = self.get(sid)
        return None if session is None else session.operator

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


def cookie(sid: str, *, max_age_s: int, secure: bool) -> str:
    """The `Set-Cookie` value of a session."""
    flags = f"{COOKIE}={sid}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict"
    return flags + ("; Secure" if secure else "")


def expired_cookie(*, secure: bool) -> str:
    """The `Set-Cookie` value that removes the session cookie (logout)."""
    return cookie("", max_age_s=0, secure=secure)


__all__ = ["COOKIE", "MAX_SESSIONS", "Session", "Sessions", "cookie", "expired_cookie"]
