"""`tether.client`: talk to a running `tether serve` from another process (same uid).

    from tether.client import Client
    client = Client(config="host.toml")          # or Client(state_dir="/var/lib/tether")
    view = client.submit(None, "move-1", "physical_ai.robot_move.absolute",  # its default world
                         {"robot": "arm", "targets": {"a": 0.5}})
    for view in client.watch(view["key"], timeout=60):
        print(view["state"], view.get("progress"))
    client.status(); client.stop()

The daemon is found by its lock, `<state_dir>/serve.lock` (held while it runs), and reached on
its control socket `<state_dir>/serve.sock` (0600; the daemon answers only the same uid and
the client checks the socket's owner before sending). Every call is one request line and one
answer; `watch` long-polls.

Errors are `ClientError` with a stable `code`: `daemon_not_running` (no daemon for that state
dir), `owner_no_answer`/`owner_untrusted` (the socket), `admission_conflict`
(`AdmissionConflict`: another request under the same activity id), or the code of whatever
the daemon refused (`unknown_robot`, `credential_refused`, `stale_revision`, ...).

A view is a dict: `key`, `world`, `kind`, `activity`, `state` (pending, running,
awaiting_decision, done, failed, unknown), `settled`, `final` (settled or parked),
`attempts`, `operation_id`, `revision`, `progress` (the latest progress content), `seq`, and
`result` ({outcome, code, error}) or `reason` (why it is parked) when there is one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether._coded import CodedError
from tether._dirs import check_private_dir
from tether.devices.control import daemon_socket, owner_code, owner_words, send_request
from tether.serve.locks import running
from tether.transport import TransportError

#: Every `.code` raised here besides the daemon's own refusals.
CODES = ("daemon_not_running", "owner_no_answer", "owner_untrusted", "admission_conflict")
#: How long a request waits for its answer (a watch adds its own wait).
REQUEST_TIMEOUT_S = 30.0

View = dict[str, Any]


class ClientError(CodedError):
    """A request the daemon did not do; `code` says why (see the module doc)."""


class DaemonNotRunning(ClientError):
    """No `tether serve` runs for the state dir (`daemon_not_running`)."""


class AdmissionConflict(ClientError):
    """Another request is already admitted under this activity id (`admission_conflict`)."""


def _state_dir_of(config: str | os.PathLike[str]) -> Path:
    from tether.devices.config import load_config

    state_dir: Path = load_config(config).state_dir
    return state_dir


def daemon_record(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The running daemon's lock record for `state_dir` (pid, socket, data_dir, sse), or None
    when no daemon holds it."""
    return running(Path(state_dir) / "serve.lock")


class Client:
    """A client of the daemon for one state dir (give `state_dir` or a `config` path)."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        config: str | os.PathLike[str] | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        if (state_dir is None) == (config is None):
            raise ValueError("give exactly one of state_dir or config")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (0 < timeout < math.inf)
        ):  # 0 was taken for the default, a negative one failed inside the socket module
            raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        self.state_dir = Path(state_dir) if state_dir is not None else _state_dir_of(config or "")
        # Refused as every command refuses it (a symlink, another uid's, one others may write
        # to): a daemon's socket and lock record are found there. A missing one is no
        # daemon's (`daemon_not_running`).
        check_private_dir(self.state_dir, what="host.state_dir", missing_ok=True)
        self.socket_path = daemon_socket(self.state_dir)
        self.timeout = timeout

    # --- discovery ---

    def running(self) -> dict[str, Any] | None:
        """The daemon's lock record (pid, socket, data dir, stream), or None without one."""
        return daemon_record(self.state_dir)

    def wait_ready(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the daemon answers (a `ping`); its record."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.request({"op": "ping"})  # type: ignore[no-any-return]
            except ClientError as exc:
                if time.monotonic() > deadline:
                    raise
                if exc.code not in ("daemon_not_running", "owner_no_answer"):
                    raise
            time.sleep(0.05)

    # --- one request ---

    def request(self, request: dict[str, Any], *, timeout: float | None = None) -> Any:
        """Send one request; its result, or a `ClientError` (see the module doc)."""
        if self.running() is None:
            raise DaemonNotRunning(
                "daemon_not_running",
                f"no `tether serve` runs for state dir {self.state_dir}",
                details={"state_dir": str(self.state_dir)},
            )
        try:
            wait = self.timeout if timeout is None else timeout
            return send_request(self.socket_path, request, timeout=wait)
        except TransportError as exc:
            details = dict(exc.details)
            code = owner_code(exc) or exc.code
            message = owner_words(exc.message, str(code))
            cls = AdmissionConflict if code == "admission_conflict" else ClientError
            raise cls(str(code), message, details=details) from None

    # --- Activities ---

    def submit(self, world: str | None, activity: str, kind: str, request: dict[str, Any]) -> View:
        """Ask for one Activity: its intent is committed in a tick of `world` (created if
        absent; None: the daemon's default world, `local`, or `local@HOST` where its world
        ledger is shared by hosts and it writes only its own host's worlds) unless it is
        already there. Idempotent per activity id: the same request
        returns the existing Activity (`created` False); another one raises
        `AdmissionConflict`. A request its family refuses (an unknown robot, a limit) raises
        before anything is committed."""
        ask = {"op": "submit", "activity": activity, "kind": kind, "request": request}
        view: View = self.request(ask if world is None else {**ask, "world": world})
        return view

    def get(self, key: str) -> View:
        """The Activity's view now (`key` is world/kind/activity)."""
        view: View = self.request({"op": "get", "key": key})
        return view

    def watch(self, key: str, timeout: float | None = None) -> Iterator[View]:
        """Each new view of the Activity (progress, a state or attempt change) until it is
        final (settled, or parked for an operator) or `timeout` seconds pass (None: no
        deadline). The last view yielded tells which."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: tuple[Any, Any, Any] = (None, None, None)
        while True:
            wait = 10.0 if deadline is None else max(0.0, min(10.0, deadline - time.monotonic()))
            view: View = self.request(
                {
                    "op": "watch",
                    "key": key,
                    "seq": seen[0],
                    "state": seen[1],
                    "attempts": seen[2],
                    "timeout_s": wait,
                },
                timeout=wait + self.timeout,
            )
            now = (view.get("seq"), view.get("state"), view.get("attempts"))
            if now != seen or view.get("final"):
                yield view
            seen = now
            if view.get("final"):
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def live_canonical(self, world: str) -> dict[str, Any]:
        """The canonical record of `world`'s live session and its position in the live frames
        (``{epoch, seq, record, workspace_id, world}``): what a `tether.live.LiveClient` of
        ``<live>/<world>`` reconciles with (`LiveClient.for_daemon` builds one)."""
        doc: dict[str, Any] = self.request({"op": "live_canonical", "world": world})
        return doc

    # --- devices and the host ---

    def status(self) -> dict[str, Any]:
        """Devices (identity, owner pid, latch, fresh read-back in SI units with decoded
        errors), Activities by state, parked decisions with their age, and the daemon."""
        doc: dict[str, Any] = self.request({"op": "status"})
        return doc

    def stop(self, robots: list[str] | None = None) -> list[dict[str, Any]]:
        """Latch and safe-stop `robots` (default: every configured one); one report each."""
        reports: list[dict[str, Any]] = self.request({"op": "stop", "robots": robots or []})
        return reports


__all__ = [
    "CODES",
    "AdmissionConflict",
    "Client",
    "ClientError",
    "DaemonNotRunning",
    "View",
    "daemon_record",
]
