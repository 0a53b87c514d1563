"""`sqlite_url` and `sqlite_path`: the one place a SQLite store's URL is made from a path and
read back. A path's `%`, `?` and `#` are percent-encoded, so any directory name round-trips; a
bare `?` or `#` (a query or fragment, which no SQLite store takes) is refused by every opener
with `bad_url`, saying how to write one."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.activities import Catalog
from tether.storage._urls import SQLITE_URL_FORM, sqlite_file, sqlite_path, sqlite_url
from tether.world import open_ledger

NAMES = ["plain", "lab #2", "what?", "100% sure", "lab%20a", "a%3Fb", "café ☕", "x'y\"z"]


@pytest.mark.parametrize("name", NAMES)
def test_a_path_round_trips_through_its_url(name: str) -> None:
    path = f"/data/{name}/catalog.db"
    url = sqlite_url(path)
    assert url.startswith("sqlite:///data/")
    assert "?" not in url and "#" not in url
    assert sqlite_path(url.removeprefix("sqlite://")) == path


@pytest.mark.parametrize(
    "rest",
    ["/a/b.db?mode=ro", "/a/b.db#frag", "relative.db", "/a/dir/", "/a/%FF.db", "/a/%00.db"],
)
def test_what_names_no_file_is_none(rest: str) -> None:
    assert sqlite_path(rest) is None


def test_a_percent_that_begins_no_escape_is_itself() -> None:
    assert sqlite_path("/data/100% sure/c.db") == "/data/100% sure/c.db"


@pytest.mark.parametrize("name", ["lab #2", "what?", "lab%20a"])
def test_both_stores_open_at_the_encoded_url_of_an_odd_path(tmp_path: Path, name: str) -> None:
    home = tmp_path / name
    home.mkdir()
    with Catalog.open(sqlite_url(home / "catalog.db")):
        pass
    open_ledger(sqlite_url(home / "world.db")).close()
    assert sorted(p.name for p in home.iterdir() if p.suffix == ".db") == [
        "catalog.db",
        "world.db",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing beside it
    assert sqlite_file(sqlite_url(home / "catalog.db")) == str((home / "catalog.db").resolve())


@pytest.mark.parametrize("url", ["sqlite:///tmp/a#b/catalog.db", "sqlite:///tmp/a?b/catalog.db"])
def test_a_bare_query_or_fragment_is_refused_saying_how_to_encode_it(url: str) -> None:
    with pytest.raises(Exception) as catalog:
        Catalog.open(url)
    with pytest.raises(Exception) as world:
        open_ledger(url.replace("catalog", "world"))
    for info in (catalog, world):
        assert getattr(info.value, "code", None) == "bad_url"
        assert SQLITE_URL_FORM in str(info.value)
