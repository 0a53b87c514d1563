"""URL helpers that need no database driver (importing storage must not need psycopg).

A password may reach Tether inside a URL (``user:pw@``, ``?password=``, ``?sslpassword=``) or
a key=value connection string (``password=pw``, ``password='a b'``). These helpers keep it
out of what Tether prints: `redact` masks every form of it in a URL shown to the user,
`ambiguous` tells a PostgreSQL URL that libpq would split somewhere other than its writer
meant (a password holding an unescaped ``@`` or ``/``, whose pieces libpq would take for the
host, port or database), and `scrub` takes the password out of a message about a URL.

`check_separate_files` refuses one SQLite file named for both the catalog and the world
ledger (a file holds one store), before either is opened.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

from tether.storage._errors import MixedStores, SameStoreFile

#: The query parameters and connection-string keys whose value is a secret.
PASSWORD_KEYS = frozenset({"password", "sslpassword"})
#: What `scrub` puts in place of a secret (and of a quoted text holding one).
REDACTED = "<redacted>"
#: A secret shorter than this is scrubbed only where it is a whole quoted text (or within
#: one): replacing every occurrence of two letters would garble the rest of the message.
_SHORT = 4
#: A key=value connection string's password (libpq's syntax: spaces around ``=``, a value in
#: single quotes with backslash escapes, or unquoted up to the next space).
_KV_PASSWORD = re.compile(
    r"(?<!\S)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.?)*'?|(?:[^\s\\]|\\.?)*)",
    re.IGNORECASE | re.DOTALL,
)
#: A query parameter that begins a new one (``key=``) after an ``&``: a password's value runs
#: up to the next of these, so a password holding ``&`` is masked whole.
_NEXT_PARAM = re.compile(r"&[A-Za-z_%][A-Za-z0-9_%]*=")
#: A URI's query parameter: its key.
_PARAM = re.compile(r"[?&]([^=&?]*)=")
_QUOTED = re.compile(r'"([^"]*)"')
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def _rest(url: str) -> str | None:
    """The text after ``scheme://`` of a URI, None for anything else (a key=value string,
    even one with a ``://`` in a value)."""
    scheme, sep, rest = url.partition("://")
    return rest if sep and _SCHEME.fullmatch(scheme) else None


def _index(text: str, chars: str, start: int = 0) -> int:
    """The first index at or after ``start`` of any of ``chars`` (``len(text)`` if none)."""
    found = [i for i in (text.find(c, start) for c in chars) if i >= 0]
    return min(found, default=len(text))


def _numeric_ports(authority: str) -> bool:
    """Whether ``authority`` is a list of ``host[:port]`` whose ports are numbers."""
    for host in authority.split(","):
        if host.startswith("["):  # [::1]:5432
            tail = host.partition("]")[2]
            if tail and not tail.startswith(":"):
                return False
            port = tail[1:]
        else:
            port = host.partition(":")[2]
        if port and not (port.isascii() and port.isdigit()):
            return False
    return True


def _benign(tail: str) -> bool:
    """Whether every ``@`` of ``tail`` (a URI after its authority) sits in a query value
    (``?user=me@srv``): after the ``=`` of its parameter, with no ``/`` after it there,
    unlike the ``@host/db`` that ends a user info."""
    path, _, query = tail.partition("?")
    if "@" in path:
        return False
    for param in query.split("&"):
        if "@" in param:
            key, eq, value = param.partition("=")
            if not eq or "@" in key or "/" in value[value.index("@") :]:
                return False
    return True


def _split(rest: str) -> tuple[str | None, str]:
    """A URI's user info as libpq reads it (up to the first ``@`` that no ``/`` precedes:
    None without one) and the text after it."""
    at = rest.find("@")
    if 0 <= at < _index(rest, "/"):
        return rest[:at], rest[at + 1 :]
    return None, rest


def _ambiguous_rest(rest: str) -> bool:
    userinfo, after = _split(rest)
    if userinfo is not None:
        host_end = _index(after, "/?")
        # u:p@ss@host (libpq: host `ss@host`); a password and another @ (u:p@s/s@host/db).
        return "@" in after[:host_end] or (":" in userinfo and "@" in after[host_end:])
    at = rest.find("@")
    if at < 0 or ":" not in rest[:at]:
        return False  # no @, or no `user:password` before it: nothing libpq could misplace
    # u:pa/ss@host/db: libpq reads host `u`, port `pa`, database `ss@host/db`.
    authority = rest[: _index(rest, "/?")]
    return not (_numeric_ports(authority) and _benign(rest[len(authority) :]))


def ambiguous(url: str) -> bool:
    """Whether ``url`` is a URI whose user info libpq would not read as its writer meant: an
    ``@`` or ``/`` in the password (or user) not percent-encoded, so parts of the password
    would become the host, port or database (and be shown as such). Also true of a URI with
    a password and another ``@`` anywhere, or with ``user:`` and an ``@`` after a ``/`` that is
    not in a query value: the ``@`` must be percent-encoded (``%40``) there."""
    rest = _rest(url)
    return rest is not None and _ambiguous_rest(rest)


def _query_passwords(text: str) -> list[tuple[int, int]]:
    """The spans in ``text`` (a URI's query, from its ``?``) of the values of its password
    parameters (keys percent-decoded, any case)."""
    spans = []
    for m in _PARAM.finditer(text):
        if unquote(m.group(1), errors="replace").lower() in PASSWORD_KEYS:
            more = _NEXT_PARAM.search(text, m.end())
            spans.append((m.end(), more.start() if more else len(text)))
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, the overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _uri_secrets(rest: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The spans in ``rest`` (a URI after ``://``) of its password (of all that may be one,
    for an ambiguous URI: up to its last ``@``) and of its password parameters' values."""
    if _ambiguous_rest(rest):
        at = rest.rfind("@")
        colon = rest.find(":", 0, at)
        return [(colon + 1, at)] if colon >= 0 else [(0, at)], _query_passwords(rest)
    userinfo, after = _split(rest)
    user_pw = []
    if userinfo is not None and ":" in userinfo:
        user_pw = [(userinfo.index(":") + 1, len(userinfo))]
    q = after.find("?")
    offset = len(rest) - len(after) + q
    params = [(offset + a, offset + b) for a, b in _query_passwords(after[q:])] if q >= 0 else []
    return user_pw, params


def redact(url: str) -> str:
    """``url`` with every password in it replaced by ``***`` (for messages that must show a
    URL): a URI's ``user:password@`` (one holding ``@`` or ``/`` too), its ``password`` and
    ``sslpassword`` parameters (any case), and a key=value string's ``password=`` values."""
    rest = _rest(url)
    if rest is None:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + "***", url)
    head = url[: len(url) - len(rest)]
    user_pw, params = _uri_secrets(rest)
    for start, end in reversed(_merged(user_pw + params)):
        rest = rest[:start] + "***" + rest[end:]
    return head + rest


def _kv_secrets(text: str) -> list[str]:
    found = []
    for m in _KV_PASSWORD.finditer(text):
        raw = m.group(2)
        found.append(raw)
        inner = raw[1:].removesuffix("'") if raw.startswith("'") else raw
        found.append(re.sub(r"\\(.)", r"\1", inner, flags=re.DOTALL))
    return found


def secrets(url: str) -> list[str]:
    """Every text of ``url`` that is or may be a password, as written and percent-decoded:
    what `scrub` takes out of a message (empty strings left out)."""
    rest = _rest(url)
    found: list[str] = []
    if rest is None:
        found = _kv_secrets(url)
    else:
        user_pw, params = _uri_secrets(rest)
        for start, end in user_pw + params:
            found.append(rest[start:end])
        for _, end in user_pw:  # the whole `user:password`, as libpq may quote it
            found.append(rest[:end])
    found += [unquote(s, errors="replace") for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _user(url: str) -> str | None:
    """The user name of a URI's ``user:password@`` (percent-decoded), where it is sure."""
    rest = _rest(url)
    if rest is None or _ambiguous_rest(rest):
        return None
    userinfo, _ = _split(rest)
    if userinfo is None or ":" not in userinfo:
        return None
    return unquote(userinfo.partition(":")[0], errors="replace") or None


def scrub(text: str, url: str) -> str:
    """``text`` (a message about ``url``: libpq's, or one built from it) without any password
    of ``url``: the URL itself and each of its passwords (`secrets`) are replaced by
    `REDACTED`, and so is every double-quoted text (libpq quotes the token it could not
    parse) that holds one or is part of one. Other quoted texts stay (``invalid sslmode
    value: "foo"``)."""
    found = secrets(url)
    if not found:
        return text
    for secret in (url, *found):  # a password holding a `"` would mislead the quotes
        if len(secret) >= _SHORT:
            text = text.replace(secret, REDACTED)

    user = _user(url)
    if user in found:  # a password equal to the name: the name goes too
        user = None

    def quoted(m: re.Match[str]) -> str:
        inner = m.group(1)
        if inner and inner == user:  # the login's name (`for user "ann"`) is no secret
            return m.group(0)
        if inner and any(inner in s or (len(s) >= _SHORT and s in inner) for s in found):
            return f'"{REDACTED}"'
        return m.group(0)

    return _QUOTED.sub(quoted, text)


#: A host's name where hosts share a catalog on PostgreSQL: it names the host's worlds on the
#: shared world ledger (`<id>@<host_name>`) and the device work bound to it: world id
#: characters (`tether.world`), without `@` (the owner is what follows the last one) and `/` (a
#: key's separator), short enough to leave a world id room under its 256.
SHARED_HOST_NAME = re.compile(r"[A-Za-z0-9_.:+\-]{1,64}")
#: `SHARED_HOST_NAME` in words.
SHARED_HOST_RULE = "use 1 to 64 of A-Z a-z 0-9 _ . : + -"


def postgres_url(url: str | None) -> str | None:
    """``url`` as libpq takes it (``postgresql://``, the scheme in lower case, as the stores
    open it) when it names a PostgreSQL store (``postgresql://`` or ``postgres://``, any
    case): the one store hosts share; None for any other URL or none."""
    if not isinstance(url, str):
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("postgresql", "postgres"):
        return None
    return "postgresql://" + rest


#: What a SQLite store URL looks like (said when one is refused).
SQLITE_URL_FORM = "sqlite:///abs/path.db (a '%', '?' or '#' in the path as %25, %3F or %23)"


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The ``sqlite://`` URL of the file at the absolute ``path``: its ``%``, ``?`` and ``#``
    percent-encoded (``%25``, ``%3F``, ``%23``), every other character as it is, so that
    `sqlite_path` reads ``path`` back whatever a directory is called."""
    text = os.fspath(path)
    return "sqlite://" + text.replace("%", "%25").replace("?", "%3F").replace("#", "%23")


def sqlite_path(rest: str) -> str | None:
    """The file the part of a ``sqlite://`` URL after ``sqlite://`` names (``/abs/path.db``,
    ``//abs`` too), its percent escapes decoded (`sqlite_url`); None when it names no absolute
    file: not absolute, a directory (a trailing ``/``), a query or fragment (a bare ``?`` or
    ``#``: `sqlite_url` encodes those of a path), or an escape that is not UTF-8 text. A ``%``
    that begins no escape is itself."""
    if not rest.startswith("/") or rest.endswith("/") or "?" in rest or "#" in rest:
        return None
    try:
        path = unquote(rest, errors="strict")
    except UnicodeDecodeError:
        return None
    if "\0" in path or path.endswith("/"):
        return None
    return path


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite:///abs/path.db`` URL names, as the stores open it (``sqlite:////``
    too, `sqlite_path`), with its symbolic links resolved; None for any other URL (a
    PostgreSQL one, or one naming no absolute file: its store refuses it)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "sqlite":
        return None
    path = sqlite_path(rest)
    return None if path is None else os.path.realpath("/" + path.lstrip("/"))


def check_separate_files(catalog_url: str | None, world_url: str | None) -> None:
    """Refuse a catalog and a world ledger that name the same SQLite file (`SameStoreFile`,
    `same_store_file`, a usage error): each store would read the other's tables as an older or
    newer schema of its own. Checked before either store opens, so nothing is written. One
    PostgreSQL database may hold both (their tables differ); None: not given."""
    if not isinstance(catalog_url, str) or not isinstance(world_url, str):
        return
    catalog, world = sqlite_file(catalog_url), sqlite_file(world_url)
    if catalog is None or world is None:
        return
    same = catalog == world
    if not same and os.path.exists(catalog) and os.path.exists(world):
        same = os.path.samefile(catalog, world)  # a hard link
    if same:
        raise SameStoreFile(
            "same_store_file",
            f"the catalog and the world ledger must be different files: both are {catalog}"
            " (a SQLite file holds one store)",
            details={"path": catalog},
        )


#: The URL schemes a store opens (`tether.storage.BACKENDS`'s and the world ledger's).
SCHEMES = ("postgres", "postgresql", "sqlite")


def unsupported_url(what: str, url: str | None, *, paths: bool = False) -> str | None:
    """Why `url` (the `what` store's) is no store URL, or None: a scheme no backend takes, or
    no scheme unless `paths` (a bare path is a file) allows one. A typo in a scheme is no
    file of this host: it is said so before `check_one_backend` could call it one."""
    if url is None:
        return None
    scheme, sep, _ = url.partition("://")
    if (sep and scheme.lower() in SCHEMES) or (not sep and paths):
        return None
    return (
        f"unsupported {what} URL {redact(url)!r}; use sqlite:///abs/path.db or postgresql://host/db"
    )


def check_one_backend(catalog_url: str | None, world_url: str | None) -> None:
    """Refuse a catalog and a world ledger of which one is on PostgreSQL (shared by hosts) and
    the other a file of this host (None: the data dir's file), `MixedStores` (`mixed_stores`, a
    usage error), before either opens: a ledger of one host's own names its worlds without the
    host (`local`, `grpc-<principal>`), so hosts sharing only the catalog would admit each
    other's keys from worlds of their own, and hosts sharing only the worlds would each admit,
    and run, every Activity of them into a catalog of their own."""
    catalog, world = postgres_url(catalog_url) is not None, postgres_url(world_url) is not None
    if catalog == world:
        return
    shared, local = ("catalog", "world ledger") if catalog else ("world ledger", "catalog")
    raise MixedStores(
        "mixed_stores",
        f"the {shared} is on PostgreSQL (shared by hosts) but the {local} is a file of this"
        " host: put both on PostgreSQL (--catalog URL --world URL, or [serve] catalog and"
        " world) or neither",
        details={"shared": shared, "local": local},
    )
