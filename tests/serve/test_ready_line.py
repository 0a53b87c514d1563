"""`tether serve`'s ready line on a terminal names what a person needs to reach the daemon:
its host name, every listener's address (or off) and each robot it could not connect."""

from __future__ import annotations

from tether.serve.cli import ready_words


def _ready(**over: object) -> dict[str, object]:
    ready: dict[str, object] = {
        "ready": True,
        "pid": 4242,
        "socket": "/srv/tether/serve.sock",
        "sse": None,
        "console": "https://127.0.0.1:8443",
        "grpc": "127.0.0.1:50051",
        "live": "ws://127.0.0.1:8766/live",
        "data_dir": "/srv/tether/moves",
        "host_name": "arm-host-1",
        "unavailable": {},
    }
    return {**ready, **over}


def test_the_ready_line_names_the_host_and_every_listener() -> None:
    words = ready_words(_ready())
    assert words.startswith("tether serve: pid 4242, host arm-host-1, control socket ")
    assert "gRPC 127.0.0.1:50051" in words and "console https://127.0.0.1:8443" in words
    assert "AG-UI stream off" in words and "live events ws://127.0.0.1:8766/live/<world>" in words
    assert words.endswith("; serving until SIGTERM or Ctrl-C") and "\n" not in words


def test_the_ready_line_says_which_robots_are_unavailable_and_what_is_off() -> None:
    words = ready_words(
        _ready(grpc=None, console=None, live=None, unavailable={"arm": "open_failed: no port"})
    )
    assert "gRPC off" in words and "console off" in words and "live events off" in words
    assert "robot arm unavailable (open_failed: no port)" in words


def test_status_words_name_the_same_listeners_as_the_ready_line() -> None:
    from tether.serve.status import render

    daemon = {k: v for k, v in _ready().items() if k not in ("ready", "unavailable")}
    first = render({"daemon": daemon, "devices": [], "activities": {}, "parked": []})
    first = first.splitlines()[0]
    assert "gRPC 127.0.0.1:50051" in first and "console https://127.0.0.1:8443" in first
    assert "live events ws://127.0.0.1:8766/live/<world>" in first and "AG-UI stream off" in first
    off = render({"daemon": {**daemon, "grpc": None, "console": None}}).splitlines()[0]
    assert "gRPC off" in off and "console off" in off
