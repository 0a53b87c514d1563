"""URL helpers that need no database driver (importing storage must not need psycopg)."""

from __future__ import annotations


def redact(url: str) -> str:
    """A URL with any password replaced by ``***`` (for messages that must show a URL)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    auth, at, host = rest.rpartition("@")
    if not at:
        return url
    user = auth.partition(":")[0]
    return f"{scheme}://{user}:***@{host}" if ":" in auth else url
