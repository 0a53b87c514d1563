"""Headless Chromium from the Debian packages (`/usr/bin/chromium`, `/usr/bin/chromedriver`),
driven by Selenium; nothing is downloaded (`make browser` installs the packages)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Screenshots of the browser tests (ignored by git).
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"

T = TypeVar("T")


def require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    assert not missing, (
        f"{missing} missing: run `make browser` (apt-get install chromium chromium-driver)"
    )


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session (Selenium WebDriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1100",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(check: Callable[[], T | bool | None], timeout: float = 30.0, what: str = "") -> T:
    """`check()` once it is truthy (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value  # type: ignore[return-value]
        except Exception as exc:  # a stale element while the page re-renders
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}: {last}")
        time.sleep(0.05)


def stop_all(driver: Any, timeout: float = 30.0) -> str:
    """Click the page's Stop and wait for its answer that names the latch; that answer."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "stop-all").click()
    answer: str = wait_for(
        lambda: (
            "latched" in driver.find_element(By.ID, "stop-result").text
            and driver.find_element(By.ID, "stop-result").text
        ),
        timeout=timeout,
        what="the stop's answer",
    )
    return answer


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000, path
    return path
