"""`tether db`: the one dispatcher for Tether's stores: `prune` (compact settled Activities of a
data directory's catalog), `status` and `upgrade` (schema versions, `tether.storage.dbcli`).

`tether db status URL [--json]` shows every store at URL with its schema version;
`tether db upgrade URL [--store catalog|world] [--json]` applies pending migrations (an older
store refuses to open, naming this command; stop every Tether process using it first).

`tether db prune --data-dir D --older-than 30d [--dry-run] [--json] [--batch N] [--vacuum]`
(or `--catalog URL` instead of `--data-dir`: a PostgreSQL catalog shared by hosts) compacts
every Activity settled at least that long ago (wall clock) to its key, source
receipt, input digest and settlement (the Rust core decides which records qualify and what
their compacted form is; see `Catalog.compact_settled`). A compacted key is never admitted
again: a later projection asking for it with the same input is a no-op, with another input a
conflict. Unsettled records are never touched. It is safe while a Host and workers run: it
works in short transactions they interleave with.

Artifact payloads in `D/artifacts/` are never removed: the artifact store is content-addressed
and shared (an input, a result, a provider's journal and committed world state may name the
same payload), and the catalog cannot see every reference, so deleting what it no longer names
could lose a payload something else still needs.

Exit codes (every subcommand, `tether._exit`): 0 done (`prune`: also a dry run; `status`: every
store is current), 1 failed (`status`: a store needs `upgrade` or is newer; `upgrade`: it
failed, or another upgrade kept the database's lock too long, `migration_lock_timeout`;
`prune`: a storage error; a server that refuses the login, `login_refused`), 2 usage (a bad
flag, duration or URL, a database the server does not have or a SQLite file that does not
exist, a data directory that is missing, not a directory or holds no Tether catalog;
`upgrade --store` naming the other store than a SQLite file holds, `same_store_file`), 5 a
store that cannot be used (cut short, not a database; `prune`: a catalog newer than this
Tether or one to `tether db upgrade` first; `upgrade`: a newer one), 6 the disk refused a
write, 7 a server that cannot be reached.
Errors are one line on stderr,
`tether db: CODE: message`, or with --json one object `{"error", "code", "message"}` on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from tether import _exit
from tether._args import (
    Parser,
    debug,
    error_fields,
    nonempty_path,
    refuse,
    want_json,
    warn_url_secrets,
)
from tether._coded import CodedError
from tether._dirs import DataDirError, usable_dir
from tether._sqlite_files import check_sqlite_file, check_writable
from tether.activities._catalog import Catalog
from tether.errors import TetherError
from tether.storage import SqliteCatalogStore
from tether.storage import dbcli as schema_cli
from tether.storage._schema import LATEST
from tether.storage._urls import redact, sqlite_url

EXIT_OK, EXIT_FAILED, EXIT_USAGE = _exit.OK, _exit.FAILED, _exit.USAGE
EXIT_STORE, EXIT_UNAVAILABLE = _exit.STORE_UNUSABLE, _exit.UNAVAILABLE
#: The codes `tether db` documents (a test checks them against `tether._exit`).
EXIT_CODES = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STORE, _exit.STORAGE_IO, EXIT_UNAVAILABLE)
_EPILOG = (
    "exit codes: 0 done; 1 failed (status: a store needs upgrade or is newer, or none is "
    "there; a server that refused the login or a statement: `login_refused`, `failed`; a "
    "schema the role may not use or create the stores in: `schema_denied`; an upgrade that "
    "waited out another's lock: `migration_lock_timeout`); 2 usage (`bad_url`, "
    "`no_such_database`, `no_such_schema`, `same_store_file`); 5 a store that cannot be used "
    "(status: one is damaged; `migration_needed`, a newer one); 6 the disk refused a write; "
    "7 a server that cannot be reached (`unreachable`) (see `tether --help`)."
)
DEFAULT_BATCH = 256
#: The most records `prune` compacts per transaction (`--batch`).
MAX_BATCH = 1_000_000

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")
#: The longest --older-than accepted (100 years): any longer keeps everything anyway.
MAX_OLDER_THAN_MS = 100 * 365 * _UNITS_MS["d"]
_SQLITE_MAGIC = b"SQLite format 3\x00"


class UsageError(Exception):
    """A bad command line (exit 2), with a stable code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class PruneFailed(CodedError):
    """Prune could not run on this catalog (exit 5): `catalog_newer` (a newer Tether's schema)
    or `migration_needed` (a catalog of an older schema: `tether db upgrade` it first)."""


class _Parser(Parser):
    """argparse, but a usage error is one typed line (exit 2), never the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("usage", self.usage_message(message))


def parse_duration(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s``, ``500ms`` or ``2w`` in milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise UsageError(
            "bad_duration",
            f"--older-than {text!r} is not a duration: a whole number and a unit, one of "
            f"{', '.join(_UNITS_MS)} (e.g. 30d)",
        )
    ms = int(m.group(1)) * _UNITS_MS[m.group(2)]
    if ms > MAX_OLDER_THAN_MS:
        raise UsageError("bad_duration", f"--older-than {text!r} is longer than 100 years")
    return ms


def _parser() -> _Parser:
    p = _Parser(
        prog="tether db",
        description="Maintain Tether's stores: prune a data dir's catalog, show and upgrade the "
        "schema versions of a catalog or world ledger (SQLite file or PostgreSQL).",
        epilog=_EPILOG,
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    prune = sub.add_parser(
        "prune",
        help="compact settled Activities older than a limit",
        description=(
            "Compact every Activity settled at least --older-than ago to its key, source "
            "receipt, input digest and settlement. A compacted key is never admitted again; "
            "unsettled Activities are never touched; artifact payloads are kept. Safe while a "
            "Host and workers run."
        ),
        epilog=_EPILOG,
    )
    prune.add_argument(
        "--data-dir",
        type=nonempty_path("--data-dir"),
        default=None,
        help="the Tether data directory holding catalog.db, never created (default: none; this"
        " or --catalog is required)",
    )
    prune.add_argument(
        "--catalog",
        metavar="URL",
        default=None,
        help="a catalog by URL instead: postgresql://host/db (credentials from PGPASSWORD or"
        " a password file, never printed) or sqlite:///abs/path.db (default: none)",
    )
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="settled at least this long ago, on the wall clock: 500ms, 45s, 90m, 12h, 30d, "
        "2w (required)",
    )
    prune.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be compacted, change nothing (default: off)",
    )
    prune.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help="records compacted per transaction; workers interleave between them "
        "(default: %(default)s)",
    )
    prune.add_argument(
        "--vacuum",
        action="store_true",
        help="then rewrite catalog.db without the space compaction freed; blocks writers while "
        "it runs (default: off: new records reuse the freed pages, not the space freed inside "
        "pages)",
    )
    prune.add_argument("--json", action="store_true", help="print one JSON object (default: off)")
    url_help = (
        "sqlite:///abs/path.db or postgresql://host/db (credentials from PGPASSWORD or "
        "PGPASSFILE, never the URL)"
    )
    status = sub.add_parser(
        "status",
        help="show the schema version of every store at URL",
        description="Show every Tether store at URL with its schema version and this Tether's.",
        epilog=_EPILOG,
    )
    status.add_argument("url", metavar="URL", help=url_help)
    status.add_argument("--json", action="store_true", help="print one JSON object (default: off)")
    upgrade = sub.add_parser(
        "upgrade",
        help="apply pending schema migrations to the stores at URL",
        description="Apply pending migrations in one transaction per store. Stop every Tether "
        "process using the store first: leases recorded before an upgrade count as expired.",
        epilog=_EPILOG,
    )
    upgrade.add_argument("url", metavar="URL", help=url_help)
    upgrade.add_argument(
        "--store",
        choices=schema_cli.STORES,
        default=None,
        help="only this store, created if absent (default: every store found; PostgreSQL: "
        "both when none is found)",
    )
    upgrade.add_argument("--json", action="store_true", help="print one JSON object (default: off)")
    return p


def _catalog_path(data_dir: Path) -> Path:
    """The data dir's catalog file, checked without creating or changing anything: a
    directory that holds no catalog.db is none of Tether's, refused before the data dir's own
    check (`usable_dir`) would tighten its mode (a mistyped `--data-dir ~` stays as it is)."""
    d = Path(data_dir)

    def not_ours(why: str) -> DataDirError:
        return DataDirError(
            "not_a_data_dir",
            f"--data-dir {d} is not a Tether data directory: {why}",
            details={"path": str(d), "what": "--data-dir"},
        )

    if d.is_dir() and not d.is_symlink() and not (d / "catalog.db").is_file():
        raise not_ours("it holds no catalog.db")
    d = usable_dir(data_dir, what="--data-dir", create=False)
    path = d / "catalog.db"
    if not path.is_file():
        raise not_ours("it holds no catalog.db")
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise not_ours(f"catalog.db cannot be read ({e.strerror})") from e
    if magic != _SQLITE_MAGIC:
        raise not_ours("catalog.db is not a SQLite database")
    # A SQLite file cut short is said as every store's open says it (`store_truncated`, exit
    # 5: restore it), not as a directory that is none of Tether's.
    check_sqlite_file(path, what="the Activity catalog")
    # Prune writes it, and SQLite reads a write-ahead-log store only where it may write its
    # shared memory: a read-only data dir is said so, as every store's open says it.
    check_writable(path, what="the Activity catalog")
    return path


def _schema_version(path: Path) -> int:
    """The catalog's schema version, read only (0: not a Tether catalog)."""
    from urllib.parse import quote

    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)  # a % or # is a name
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"activities", "schema_version"} <= tables:
            return 0
        row = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
        return 0 if row is None else int(row[0])
    finally:
        conn.close()


def _space(store: SqliteCatalogStore) -> dict[str, int]:
    store.checkpoint()  # best effort: a busy reader keeps part of the WAL, which is counted
    return store.space()


def _si_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def prune(
    data_dir: Path,
    older_than_ms: int,
    *,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
    vacuum: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Prune the data dir's catalog; return the report `tether db prune --json` prints."""
    path = _catalog_path(data_dir)
    try:
        found = _schema_version(path)
    except sqlite3.Error as e:
        raise DataDirError(
            "not_a_data_dir",
            f"--data-dir {path.parent} is not a Tether data directory: catalog.db: {e}",
            details={"path": str(path.parent), "what": "--data-dir"},
        ) from e
    if found == 0:
        raise DataDirError(
            "not_a_data_dir",
            f"--data-dir {path.parent} is not a Tether data directory: catalog.db holds no "
            "Activity catalog",
            details={"path": str(path.parent), "what": "--data-dir"},
        )
    if found > LATEST:
        raise PruneFailed(
            "catalog_newer",
            f"catalog.db has schema version {found}, newer than this Tether's {LATEST}; "
            "upgrade Tether to prune it",
        )
    if found < LATEST:
        raise PruneFailed(
            "migration_needed",
            f"catalog.db has schema version {found}, this Tether uses {LATEST}: stop every "
            f"Tether process using it, then run `tether db upgrade {sqlite_url(path.absolute())}`",
        )
    with Catalog.open(sqlite_url(path.absolute())) as catalog:
        store = catalog.store
        assert isinstance(store, SqliteCatalogStore)  # a data dir's catalog is SQLite
        before = _space(store)
        cutoff_ms = catalog.now().wall_ms - older_than_ms
        if dry_run:
            count = sum(1 for _ in catalog.iter_compactable(older_than_ms))
        else:
            count = catalog.compact_settled(older_than_ms, batch=batch, progress=progress)
            if vacuum:
                store.vacuum()
        after = _space(store)
    return {
        "data_dir": str(path.parent),
        "older_than_ms": older_than_ms,
        "settled_before_ms": cutoff_ms,
        "dry_run": dry_run,
        "compactable" if dry_run else "compacted": count,
        "vacuumed": vacuum and not dry_run,
        "catalog_before": before,
        "catalog_after": after,
        "artifacts": "kept",
    }


def prune_url(
    url: str,
    older_than_ms: int,
    *,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Prune the catalog at ``url`` (a PostgreSQL catalog shared by hosts, or a SQLite file);
    the report `tether db prune --catalog URL --json` prints. An older schema refuses to open
    (`SchemaOutdated`, naming `tether db upgrade`)."""
    schema_cli._scheme(url)  # a bad URL is a usage error before anything opens
    if "catalog" not in {s.store for s in schema_cli.status(url)}:
        # Opening would create one (a mistyped schema or file name): nothing to prune there.
        raise schema_cli.UrlError(
            f"{redact(url)} holds no Tether catalog: nothing to prune (nothing was created)",
            "usage",
        )
    with Catalog.open(url) as catalog:
        cutoff_ms = catalog.now().wall_ms - older_than_ms
        if dry_run:
            count = sum(1 for _ in catalog.iter_compactable(older_than_ms))
        else:
            count = catalog.compact_settled(older_than_ms, batch=batch, progress=progress)
    return {
        "catalog": redact(url),
        "older_than_ms": older_than_ms,
        "settled_before_ms": cutoff_ms,
        "dry_run": dry_run,
        "compactable" if dry_run else "compacted": count,
        "vacuumed": False,
        "artifacts": "kept",
    }


def _render(report: dict[str, Any], older_than: str) -> str:
    when = _utc(report["settled_before_ms"])
    if report["dry_run"]:
        n = report["compactable"]
        head = f"dry run: {n:,} settled Activities older than {older_than} (settled before {when})"
        return head + " would be compacted; nothing changed"
    n = report["compacted"]
    lines = [f"compacted {n:,} settled Activities older than {older_than} (settled before {when})"]
    if "catalog_before" not in report:  # a catalog by URL: the server keeps its own space
        return "\n".join([*lines, "artifact payloads are kept (see `tether db prune --help`)"])
    b, a = report["catalog_before"], report["catalog_after"]
    size = f"catalog.db: {_si_bytes(b['file_bytes'] + b['wal_bytes'])} before, "
    size += f"{_si_bytes(a['file_bytes'] + a['wal_bytes'])} after"
    if report["vacuumed"]:
        size += " (vacuumed)"
    else:
        free = _si_bytes(a["free_bytes"])
        size += f" ({free} in free pages, which new records reuse; --vacuum also returns the"
        size += " space freed inside pages)"
    lines += [size, "artifact payloads are kept (see `tether db prune --help`)"]
    return "\n".join(lines)


class _Progress:
    """A one-line running count on a terminal's stderr."""

    def __init__(self) -> None:
        self.shown = False

    def __call__(self, done: int) -> None:
        print(f"\rcompacting: {done:,} records", end="", file=sys.stderr, flush=True)
        self.shown = True

    def end(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def _schema_command(args: argparse.Namespace) -> int:
    """`tether db status|upgrade`: print the stores' versions; the exit code of the table."""
    if args.cmd == "status":
        schema_cli.check_exists(args.url)
        rows = schema_cli.status(args.url)
        print(schema_cli.render(args.url, rows, args.json))
        if any(r.damaged for r in rows):
            return _exit.STORE_UNUSABLE  # its tables and its version disagree: a backup's
        # Nothing found is no "every store current" (a mistyped path would pass as one).
        return EXIT_OK if rows and all(r.state == "current" for r in rows) else EXIT_FAILED
    # Each store's version before, read under the upgrade's lock, to say what it did.
    found, rows = schema_cli.upgrade_from(args.url, args.store)
    before = {s.store: s.version for s in found}
    print(schema_cli.render(args.url, rows, args.json, before=before))
    return EXIT_OK


def _failed(e: BaseException, fail: Callable[..., int]) -> int:
    """A failure of a store: its own code and the exit code of the table (a store cut short
    or of an older schema, a full disk, a server that cannot be reached, a bad URL, the
    catalog and the world ledger in one file) or `failed`."""
    code = getattr(e, "code", None)
    exit_code = _exit.for_error(e)
    if exit_code == _exit.STORAGE_IO:
        from tether._sqlite_files import storage_failure

        code = storage_failure(e)
    coded = isinstance(getattr(e, "code", None), str)
    _, text, details = error_fields(e) if coded else ("", str(e), {})
    if isinstance(code, str) and (code in _exit.ERROR_CODES or exit_code == _exit.STORAGE_IO):
        # The line names its code (the JSON also its class): the class is not repeated.
        return fail(exit_code, type(e).__name__, code, text.splitlines()[0], details)
    # `failed`: the line says what failed, by its own code or else its class.
    own = getattr(e, "code", None) if coded else type(e).__name__
    return fail(EXIT_FAILED, type(e).__name__, "failed", f"{own}: {text}".splitlines()[0])


def _answered(e: BaseException) -> bool:
    """Whether the server answered the failed statement (an error with its SQLSTATE), rather
    than the connection breaking under it (no SQLSTATE: the server cannot be reached)."""
    cause = e.__cause__
    return cause is None or getattr(cause, "sqlstate", None) is not None


def main(argv: list[str]) -> int:
    """Entry point of `tether db`."""
    want_json("--json" in argv)  # a refusal is then also its JSON document

    def fail(
        code: int, error: str, err_code: str, message: str, details: dict[str, Any] | None = None
    ) -> int:
        failure = sys.exc_info()[1]
        if failure is not None and debug():  # `--debug` / TETHER_DEBUG=1: the traceback first
            traceback.print_exception(failure)
        refuse("tether db", err_code, message, error=error, details=details)  # JSON with --json
        return code

    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.cmd is None:
            raise UsageError(
                "usage", "name a command: prune, status or upgrade (see `tether db --help`)"
            )
        if args.cmd == "prune":
            older_than_ms = parse_duration(args.older_than)
            if not 1 <= args.batch <= MAX_BATCH:
                raise UsageError("usage", f"--batch must be 1..{MAX_BATCH}, not {args.batch}")
            if (args.data_dir is None) == (args.catalog is None):
                raise UsageError("usage", "name exactly one of --data-dir and --catalog URL")
            if args.catalog is not None and not args.catalog.strip():
                # An unset shell variable, as `tether serve` and `tether worker` say it.
                raise UsageError(
                    "usage", "--catalog is empty: give the store's URL, or leave the flag out"
                )
            if args.catalog is not None and args.vacuum:
                raise UsageError("usage", "--vacuum applies to a data directory's catalog.db")
    except UsageError as e:
        message = e.message
        if e.code == "usage" and "--help`)" not in message:  # as every command's usage line
            message += f" (see `tether db {args.cmd} --help`)"
        return fail(EXIT_USAGE, "UsageError", e.code, message)
    if args.cmd != "prune":
        try:
            done = _schema_command(args)
            warn_url_secrets("tether db", url=args.url)  # said once it was used, not on a refusal
            return done
        except schema_cli.UrlError as e:
            return fail(EXIT_USAGE, "UsageError", e.code, str(e))
        except schema_cli.DatabaseError as e:  # by its code: a refused login is FAILED, ...
            code = getattr(e, "code", None)
            if not isinstance(code, str) and _answered(e):  # a statement failed (a right)
                return fail(EXIT_FAILED, type(e).__name__, "failed", str(e).splitlines()[0])
            code = code if isinstance(code, str) else "unreachable"  # the connection broke
            exit_code = _exit.ERROR_CODES.get(code, EXIT_UNAVAILABLE)
            return fail(exit_code, type(e).__name__, code, str(e).splitlines()[0])
        except (TetherError, OSError, sqlite3.Error) as e:
            return _failed(e, fail)
    progress = _Progress() if not args.json and not args.dry_run and sys.stderr.isatty() else None
    try:
        if args.catalog is not None:
            report = prune_url(
                args.catalog,
                older_than_ms,
                dry_run=args.dry_run,
                batch=args.batch,
                progress=progress,
            )
        else:
            report = prune(
                args.data_dir,
                older_than_ms,
                dry_run=args.dry_run,
                batch=args.batch,
                vacuum=args.vacuum,
                progress=progress,
            )
    except schema_cli.UrlError as e:
        return fail(EXIT_USAGE, "UsageError", e.code, str(e))
    except DataDirError as e:
        return fail(EXIT_USAGE, type(e).__name__, e.code, e.message)
    except PruneFailed as e:
        return fail(EXIT_STORE, type(e).__name__, e.code, e.message)
    except (TetherError, OSError, sqlite3.Error) as e:
        return _failed(e, fail)
    finally:
        if progress is not None:
            progress.end()
    print(json.dumps(report) if args.json else _render(report, args.older_than))
    warn_url_secrets("tether db", catalog=args.catalog)
    return EXIT_OK
