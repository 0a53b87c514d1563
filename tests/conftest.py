"""Shared pytest configuration: Hypothesis profiles, the slow-test switch, the storage
backends (SQLite files, a real PostgreSQL with a schema per test) and the recorder of every
output the suite's runs write, which the last test searches for secrets (tests/_secrets.py)."""

from __future__ import annotations

import inspect
import logging
import os
import subprocess
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import argon2
import pytest
from hypothesis import HealthCheck, settings
from tether.testing._postgres import find_server, schema_url

from tests import backends, sampling
from tests._secrets import RECORDER, RECORDINGS, LogRecorder
from tests.backends import BACKENDS

settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("slow" if os.environ.get("TETHER_SLOW") else "fast")


#: The secret scan runs after every other test (it searches what they wrote).
SCAN_LAST = "tests/test_zz_secret_scan.py"


def pytest_report_header(config: pytest.Config) -> str:
    """The seed of this run's sampled sweep points (`tests/sampling.py`)."""
    return f"sampled sweep points: TETHER_SAMPLE_SEED={sampling.SEED}"


#: The timeout of each slow sweep (TETHER_SLOW=1).
SLOW_TIMEOUT_S = 3 * 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The secret scan goes last. Tests marked `slow` run only when TETHER_SLOW=1, each with
    `SLOW_TIMEOUT_S` (a thousand rounds of server restarts outlast the suite's 300 s per
    test); each has a sampled fast sibling."""
    items.sort(key=lambda item: item.nodeid.startswith(SCAN_LAST))  # stable: order kept
    if os.environ.get("TETHER_SLOW"):
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        return
    skip = pytest.mark.skip(reason="slow sweep: set TETHER_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# --- The secret recorder: hashed secrets, child outputs, log records, captured sections ---


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "collection").rsplit(" ", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    """Before collection (test modules hash their secrets at import): every secret hashed in
    this process, every child's collected output and every log record go to `RECORDER`."""
    hash_ = argon2.PasswordHasher.hash
    communicate = subprocess.Popen.communicate

    def recording_hash(self: argon2.PasswordHasher, password: str | bytes, **kw: Any) -> str:
        RECORDER.secret(
            password if isinstance(password, str) else password.decode("utf-8", "replace")
        )
        return hash_(self, password, **kw)

    def recording_communicate(self: subprocess.Popen[Any], *args: Any, **kw: Any) -> Any:
        given = args[0] if args else kw.get("input")
        argv = [str(a) for a in self.args] if isinstance(self.args, list | tuple) else []
        if given and ("--credential-stdin" in argv or {"operator", "hash"} <= set(argv)):
            # A child that reads a credential from stdin: its first line is a secret.
            line = given.decode("utf-8", "replace") if isinstance(given, bytes) else str(given)
            RECORDER.secret(line.splitlines()[0] if line.splitlines() else line)
        out, err = communicate(self, *args, **kw)
        where = f"{_current_test()}: child {self.args!r}"
        RECORDER.record(f"{where} stdout", out)
        RECORDER.record(f"{where} stderr", err)
        return out, err

    argon2.PasswordHasher.hash = recording_hash  # type: ignore[method-assign]
    subprocess.Popen.communicate = recording_communicate  # type: ignore[method-assign]
    logging.getLogger().addHandler(LogRecorder(RECORDER))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With `RECORDINGS` set (`make pytest`: the suite on several processes, then the scan on
    its own), this process's recordings are dumped there for the scan, its temporary
    directory among the roots searched."""
    where = os.environ.get(RECORDINGS)
    if not where or session.config.option.collectonly:
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        try:
            RECORDER.files_under(factory.getbasetemp())
        except OSError:
            pass
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    RECORDER.dump(Path(where) / f"{worker}-{os.getpid()}.json")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    """pytest's captured stdout, stderr and log of each test phase are recorded too."""
    outcome = yield
    report = outcome.get_result()
    for title, content in report.sections:
        RECORDER.record(f"{item.nodeid}: {title}", content)


# --- PostgreSQL: the server at 127.0.0.1:5432, else a throwaway cluster; a schema per test ---


@pytest.fixture(scope="session")
def pg_base() -> Iterator[str]:
    """The PostgreSQL test database's URL (see `tether.testing._postgres.find_server`).

    Skips loudly when there is none; under CI=true that is a failure instead.
    """
    url, cluster, reason = find_server()
    if url is None:
        message = f"PostgreSQL tests cannot run: {reason}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield url
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def pg_url(pg_base: str) -> Iterator[str]:
    """A URL whose search path is a fresh schema of its own, dropped after the test."""
    with _Schemas(pg_base) as schemas:
        yield schemas.new()


class _Schemas:
    """Fresh PostgreSQL schemas for one test, dropped at its end.

    With a ``pool`` (the session's emptied schemas), a schema comes from the pool when there is
    one and, after a test that passed, goes back to it emptied (`backends.empty_stores`)
    instead of being dropped: creating the stores' tables costs far more than emptying them.
    """

    def __init__(self, base: str, pool: list[str] | None = None) -> None:
        self.base = base
        self.names: list[str] = []
        self.pool = pool
        self.keep = False  # set by the owner: the test passed, its schemas may be reused
        self._urls: dict[str, str] = {}

    def new(self) -> str:
        import psycopg

        if self.pool:
            schema = self.pool.pop()
        else:
            schema = "t_" + uuid.uuid4().hex[:12]
            with psycopg.connect(self.base, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
        self.names.append(schema)
        self._urls[schema] = schema_url(self.base, schema)
        return self._urls[schema]

    def __enter__(self) -> _Schemas:
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg

        if self.pool is not None and self.keep and exc[0] is None:
            for schema in self.names:
                backends.empty_stores(self._urls[schema])
                self.pool.append(schema)
            return
        with psycopg.connect(self.base, autocommit=True) as conn:
            # A session a test left open holds no lock past its idle timeout.
            conn.execute("SET lock_timeout = '30s'")
            for schema in self.names:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def pg_schema_pool(pg_base: str) -> Iterator[list[str]]:
    """Emptied schemas that in-process `make_env` tests reuse (dropped at the session's end)."""
    pool: list[str] = []
    with _Schemas(pg_base) as schemas:
        yield pool
        schemas.names.extend(pool)


def _poolable(function: Any) -> bool:
    """An in-process test of `make_env` environments only: nothing outlives it that could
    still write to its schema (no Host of `make_host`, no child process)."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return "make_env(" in source and not any(
        word in source for word in ("make_host(", "subprocess", "Popen", "multiprocessing")
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that build Hosts with `hosttools.make_host` (or environments with
    `hosttools.make_env`) run on both backends."""
    try:
        source = inspect.getsource(metafunc.function)
    except (OSError, TypeError):
        return
    if "make_host(" in source or "make_env(" in source:
        metafunc.parametrize("host_backend", BACKENDS, indirect=True)


@pytest.fixture(autouse=True)
def host_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend of `make_host` Hosts (SQLite unless the test is parametrised): while a
    `postgres` test runs, each data dir's stores live in a PostgreSQL schema of its own (the
    same dir, the same schema: a restarted Host finds its data). In-process `make_env` tests
    get their schemas from `pg_schema_pool`: emptied, never shared by two tests at once."""
    backend = getattr(request, "param", "sqlite")
    if backend != "postgres":
        yield backend
        return
    base = str(request.getfixturevalue("pg_base"))
    by_dir: dict[Path, str] = {}
    pooled = _poolable(request.function)
    pool = request.getfixturevalue("pg_schema_pool") if pooled else None
    failed_before = request.session.testsfailed
    with _Schemas(base, pool) as schemas:

        def schema_for(data_dir: Path) -> str:
            key = Path(data_dir).resolve()
            if key not in by_dir:
                by_dir[key] = schemas.new()
            return by_dir[key]

        backends.schema_for_dir = schema_for
        try:
            yield backend
        finally:
            backends.schema_for_dir = None
        # The call phase's report is in by now: a failed test's schemas are dropped, not reused.
        schemas.keep = request.session.testsfailed == failed_before


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a parametrised test runs on."""
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A base URL of the test's stores on its backend: a SQLite directory or a PostgreSQL
    schema (`tests.backends.catalog_url_for` / `world_url_for` give each store's URL)."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite://{tmp_path}"
