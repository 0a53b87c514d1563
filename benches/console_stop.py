"""The console's Stop round trip against `tether stop`'s, measured in the same run.

A real `tether serve` (a subprocess) owns an emulated DYNAMIXEL arm (the emulator is a separate
process on a pty, its shafts in real time) with the console on. Each round submits a long move,
waits until its shafts move, then stops it, alternately:

- console: a click on the page's Stop (headless Chromium from the Debian packages, Selenium)
  until the page shows the device's read-back with every joint `held` (the stop's answer
  carries the read-back taken after the stop frames);
- CLI (the baseline): `tether stop --config host.toml --json`, from the process start until it
  exits with every joint `held` (what an operator at a terminal waits for).

Each stop is then checked on the emulator itself (torque on, goal = present, standing still)
and the robot is resumed through the console API. Prints the medians and the ratio
console / CLI (target <= 2x).

    .venv/bin/python benches/console_stop.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "adapters"), str(ROOT / "tests" / "console"), str(ROOT)]

from _browser import chromium, stop_all, wait_for  # noqa: E402
from _console_setup import console_host, login  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def held_on_emulator(host: object) -> bool:
    states = [host.emu.request(op="snapshot", id=i) for i in (1, 2)]  # type: ignore[attr-defined]
    return all(
        s["torque_enable"] == 1
        and not s["moving"]
        and abs(s["goal_position"] - s["present_position"]) <= 2
        for s in states
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="stops of each kind (default 8)")
    args = parser.parse_args()
    console_ms: list[float] = []
    page_ms: list[float] = []
    cli_ms: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, console_host(Path(tmp), speed_scale=1.0) as host:
        http = host.http()
        csrf = login(http)
        with chromium() as page:
            page.get(host.url)
            wait_for(lambda: page.find_element(By.ID, "live-state").text == "live", what="live")
            for n in range(2 * args.rounds):
                target = 1.4 if n % 2 == 0 else -1.4
                key = host.submit(f"bench-{n}", {"a": target, "b": -target})
                host.wait(key, ("moving",))
                time.sleep(0.2)  # mid-move
                if n % 2 == 0:
                    page.execute_script("document.getElementById('stop-result').textContent = ''")
                    t0 = time.perf_counter()
                    text = stop_all(page)
                    console_ms.append((time.perf_counter() - t0) * 1000)
                    page_ms.append(page.execute_script("return window.tetherLastStop.ms"))
                    assert "a: held" in text and "b: held" in text, text
                else:
                    t0 = time.perf_counter()
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "tether",
                            "stop",
                            "--config",
                            str(host.config),
                            "--json",
                        ],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    cli_ms.append((time.perf_counter() - t0) * 1000)
                    (report,) = json.loads(done.stdout)
                    assert [j["state"] for j in report["joints"]] == ["held", "held"], report
                wait_for(lambda: held_on_emulator(host), timeout=10, what="held on the emulator")
                host.wait(key, ("awaiting_decision",))
                resumed = http.post(
                    "/api/device",
                    json={"robot": "arm", "action": "resume"},
                    headers={"X-CSRF-Token": csrf},
                )
                assert resumed.status_code == 200, resumed.text
        http.close()
    c, b = statistics.median(console_ms), statistics.median(cli_ms)
    print(
        f"console Stop (click -> read-back held on the page): median {c:.1f} ms, "
        f"max {max(console_ms):.1f} ms over {len(console_ms)}"
    )
    print(
        f"tether stop (process start -> exit with held):      median {b:.1f} ms, "
        f"max {max(cli_ms):.1f} ms over {len(cli_ms)}"
    )
    print(
        f"  of which in the page (click event -> read-back shown): median "
        f"{statistics.median(page_ms):.1f} ms (the rest is the driver's polling)"
    )
    ratio = c / b
    print(f"ratio console / CLI: {ratio:.2f}x (target <= 2x): {'ok' if ratio <= 2 else 'MISSED'}")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
