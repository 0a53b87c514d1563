"""The exit codes of every `tether` command, defined once (the README's exit-code table is
`markdown_table()` of this module, and a test keeps the two equal).

Every code means one thing for every command. A command that does not produce one of them
does not use it; none gives a code a second meaning. `for_error(exc)` maps an expected error
to its code by its stable `code` (or, for an OS error, its errno), so a failure that escapes a
command is classified the same way whichever command it escaped from.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class ExitCode:
    """One exit status: its value, its constant's name and what it means for every command."""

    value: int
    name: str
    meaning: str


OK: Final = 0
FAILED: Final = 1
USAGE: Final = 2
PARKED: Final = 3
TIMEOUT: Final = 4
STORE_UNUSABLE: Final = 5
STORAGE_IO: Final = 6
UNAVAILABLE: Final = 7
INTERNAL: Final = 70
INTERRUPTED: Final = 130

#: Every exit code, in the order of the README's table.
CODES: Final[tuple[ExitCode, ...]] = (
    ExitCode(OK, "OK", "done: the command did what it was asked"),
    ExitCode(
        FAILED,
        "FAILED",
        "the command ran and what it was asked failed or was refused (a decision, a credential, "
        "a joint not in its stop state, a store `tether db status` finds to need `tether db "
        "upgrade`, a device error)",
    ),
    ExitCode(
        USAGE,
        "USAGE",
        "usage or configuration: a bad flag or value, an invalid host.toml, an unknown robot or "
        "joint, a bad URL, a data or state dir that is missing or a file, a request refused "
        "before anything was sent (a limit, `request_too_large`)",
    ),
    ExitCode(PARKED, "PARKED", "parked for an operator: `tether operator` decides"),
    ExitCode(TIMEOUT, "TIMEOUT", "not concluded before the deadline (run it again to follow it)"),
    ExitCode(
        STORE_UNUSABLE,
        "STORE_UNUSABLE",
        "a store cannot be used as it is: cut short or not a database (`store_truncated`, "
        "`not_a_database`), an older layout (`old_layout`), a schema to upgrade first or of a "
        "newer Tether (`migration_needed`, `catalog_newer`, `world_newer`), tables missing "
        "(`store_damaged`); nothing was written to it",
    ),
    ExitCode(
        STORAGE_IO,
        "STORAGE_IO",
        "the disk refused a write (`disk_full`, `file_too_large`, `storage_io_error`, "
        "`read_only_storage`): nothing committed is lost; free space (or make the storage "
        "writable) and run the same command again",
    ),
    ExitCode(
        UNAVAILABLE,
        "UNAVAILABLE",
        "a server or device could not be reached (`unreachable`, a port owned by another "
        "process: `port_busy`, also at `tether serve`'s start: a robot another daemon drives), "
        "no `tether serve` runs where one must (`daemon_not_running`), "
        "or another one already does (`daemon_running`; on a shared catalog, under the same "
        "host name: `host_name_taken`), or a listener's address is taken "
        "(`sse_unavailable`, `grpc_unavailable`)",
    ),
    ExitCode(INTERNAL, "INTERNAL", "a bug in Tether: the traceback is printed; please report it"),
    ExitCode(INTERRUPTED, "INTERRUPTED", "interrupted (SIGINT, Ctrl-C) before it concluded"),
)

BY_VALUE: Final = {c.value: c for c in CODES}

#: Stable error codes -> exit code (an error whose code is not listed is FAILED, or the
#: command's own default: the FAILED ones listed here are FAILED whatever that default).
ERROR_CODES: Final[dict[str, int]] = {
    # A server that was reached refused the login; another process kept a store's migration
    # lock past the wait (`tether.storage._pg_schema.MIGRATION_LOCK_TIMEOUT_MS`).
    # A role that may not read the clock the catalog's leases run on (`clock_unavailable`).
    # A search path naming a schema the role may not use (`schema_denied`).
    **dict.fromkeys(
        ("login_refused", "migration_lock_timeout", "clock_unavailable", "schema_denied"), FAILED
    ),
    **dict.fromkeys(
        (
            "usage",
            "bad_duration",
            "not_a_directory",
            "no_such_directory",
            "not_a_data_dir",
            "data_dir_missing",
            "unknown_key",
            "unknown_robot",
            "unknown_joint",
            "invalid_config",
            "config_not_found",
            "limit_violation",
            "request_too_large",
            "invalid_log_format",
            "invalid_log_level",
            "insecure_listener",
            "insecure_tls_key",
            "no_authenticator",
            "tls_unusable",
            "mixed_stores",
            # A store URL no backend takes, a database the server does not have, one SQLite
            # file named for both the catalog and the world ledger.
            "bad_url",
            "no_such_database",
            "no_such_schema",
            "bad_families",
            "same_store_file",
            # A world of another host on a shared world ledger (`tether move --world`), a host
            # name that cannot name this host's worlds there.
            "world_of_another_host",
            "bad_host_name",
        ),
        USAGE,
    ),
    **dict.fromkeys(
        (
            "store_truncated",
            "not_a_database",
            "old_layout",
            "migration_needed",
            "catalog_newer",
            "world_newer",
            "store_damaged",
        ),
        STORE_UNUSABLE,
    ),
    **dict.fromkeys(
        ("disk_full", "file_too_large", "storage_io_error", "read_only_storage"), STORAGE_IO
    ),
    **dict.fromkeys(
        (
            "unreachable",
            "port_busy",
            "daemon_running",
            "host_name_taken",
            "daemon_not_running",
            "sse_unavailable",
            "console_unavailable",
            "grpc_unavailable",
            "live_unavailable",
        ),
        UNAVAILABLE,
    ),
}


def for_error(exc: BaseException, default: int = FAILED) -> int:
    """The exit code of an expected error: a failed write of the disk anywhere in its chain,
    its stable `code`, its class (configuration, a data dir, a port owned elsewhere), a
    usage-like OS error (a path that is missing or a file), else `default`."""
    from tether._sqlite_files import storage_failure

    kind = storage_failure(exc)
    if kind is not None:
        return STORAGE_IO
    from tether.devices.control import owner_code

    code = owner_code(exc) or getattr(exc, "code", None)  # the owner's own refusal is the cause
    if isinstance(code, str) and code in ERROR_CODES:
        return ERROR_CODES[code]
    from tether._config import HostConfigError
    from tether._dirs import DataDirError
    from tether._log import LogConfigError
    from tether.storage._errors import SchemaOutdated
    from tether.transport import PortBusy

    if isinstance(exc, SchemaOutdated):
        return STORE_UNUSABLE
    if isinstance(exc, HostConfigError | DataDirError | LogConfigError):
        return USAGE
    if isinstance(exc, PortBusy):
        return UNAVAILABLE
    if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        return USAGE
    return default


def markdown_table() -> str:
    """The README's exit-code table."""
    rows = ["| code | name | meaning (the same for every command) |", "|---|---|---|"]
    rows += [f"| {c.value} | `{c.name}` | {c.meaning} |" for c in CODES]
    return "\n".join(rows)


__all__ = [
    "BY_VALUE",
    "CODES",
    "ERROR_CODES",
    "FAILED",
    "INTERNAL",
    "INTERRUPTED",
    "OK",
    "PARKED",
    "STORAGE_IO",
    "STORE_UNUSABLE",
    "TIMEOUT",
    "UNAVAILABLE",
    "USAGE",
    "ExitCode",
    "for_error",
    "markdown_table",
]
