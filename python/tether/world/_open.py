"""`open_ledger`: the world ledger a URL names (`sqlite:///abs/world.db`, `postgresql://...`)."""

from __future__ import annotations

from collections.abc import Callable

from tether.storage._errors import with_code
from tether.storage._urls import SQLITE_URL_FORM, redact, sqlite_path
from tether.world._errors import WorldError
from tether.world._port import WorldLedger
from tether.world._sqlite import SqliteLedger


def open_ledger(url: str, *, clock: Callable[[], int] | None = None) -> WorldLedger:
    """Open the world ledger at ``url``: ``sqlite:///abs/path/world.db`` (one host) or
    ``postgresql://host/db`` (hosts sharing a server; credentials from the environment or a
    password file). ``clock`` gives tick record times (default: the host's or the server's).

    Raises:
        WorldError: an unsupported or malformed URL (code `bad_url`), or a ledger that cannot
            be opened (one line naming the host and the cause, never the password; a server
            that cannot be reached or refuses the login carries its code, see
            `tether.storage._pg.connect`).
    """
    if not isinstance(url, str):
        raise WorldError(f"world URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "sqlite":
        path = sqlite_path(rest)
        if path is None:
            raise with_code(
                WorldError(
                    "sqlite world URLs name an absolute file, without query or fragment:"
                    f" {SQLITE_URL_FORM} (got {rest!r})"
                ),
                "bad_url",
            )
        return SqliteLedger.open(path, clock=clock)
    if sep and scheme in ("postgresql", "postgres"):
        try:  # psycopg only when asked for
            from tether.storage._pg import check_url
            from tether.world._postgres import PostgresLedger
        except ImportError as e:
            raise WorldError(
                f"PostgreSQL ledgers need psycopg: pip install 'tether[postgres]' ({e})"
            ) from None

        url = "postgresql://" + rest  # the scheme in any case, as the catalog takes it
        check_url(url, WorldError)
        return PostgresLedger.open(url, clock=clock)
    raise with_code(
        WorldError(f"unsupported world URL {redact(url)!r}; supported schemes: postgresql, sqlite"),
        "bad_url",
    )
