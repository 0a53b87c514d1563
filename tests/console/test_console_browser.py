"""The console page in a real browser (headless Chromium, Selenium) over a real `tether serve`
and the DYNAMIXEL emulator: login, a move parked by a power loss appearing live with its
evidence, a re-issue refused on a revision gone stale after a joint was moved by hand (the new
evidence and the difference shown), the re-issue on the fresh revision (one more ACTION in the
emulator's journal), Stop during a move, and Stop while logged out. Screenshots go to
test-artifacts/console/."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _browser import chromium, screenshot, stop_all, wait_for
from _console_setup import Host, console_host
from _dxl_setup import CREDENTIAL, target_actions
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from tether.adapters.dynamixel import tables

MOVE = {"a": 1.0, "b": -1.0}
GOALS = {1: tables.radians_to_ticks(1.0), 2: tables.radians_to_ticks(-1.0)}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    with console_host(tmp_path_factory.mktemp("console-browser"), speed_scale=1.0) as h:
        yield h


@pytest.fixture(scope="module")
def page(host: Host) -> Iterator[Any]:
    with chromium() as driver:
        driver.get(host.url)
        wait_for(lambda: "live" == driver.find_element(By.ID, "live-state").text, what="live")
        yield driver


def card(driver: Any, key: str) -> Any:
    return driver.find_element(By.CSS_SELECTOR, f'div.decision[data-key="{key}"]')


def shown(driver: Any, key: str) -> dict[str, str] | None:
    """One decision card as it stands (read in one script: the page re-renders cards)."""
    found: dict[str, str] | None = driver.execute_script(
        "const c = [...document.querySelectorAll('div.decision')]"
        "  .find((n) => n.dataset.key === arguments[0]);"
        "if (!c) return null;"
        "const q = (s) => (c.querySelector(s) || {}).textContent || '';"
        "return {text: c.innerText, revision: c.dataset.revision,"
        " since: q('div.result table'), present_a: q('tr[data-joint=\"a\"] td.present'),"
        " button_revision: c.querySelector('button.decide.reissue').dataset.revision};",
        key,
    )
    return found


def text(driver: Any, element_id: str) -> str:
    return str(
        driver.execute_script("return document.getElementById(arguments[0]).innerText", element_id)
    )


def click(driver: Any, selector: str) -> None:
    """Click the element `selector` names once it is there (re-found if re-rendered)."""
    wait_for(
        lambda: driver.execute_script(
            "const b = document.querySelector(arguments[0]); if (!b) return false;"
            " b.click(); return true;",
            selector,
        ),
        what=selector,
    )


def test_a_wrong_credential_is_refused_and_the_operator_logs_in(page: Any) -> None:
    stop = page.find_element(By.ID, "stop-all")
    assert (
        stop.is_displayed() and "not an emergency stop" in page.find_element(By.ID, "notice").text
    )
    page.find_element(By.ID, "credential").send_keys("not the credential")
    page.find_element(By.ID, "login").click()
    error = wait_for(lambda: page.find_element(By.ID, "login-error").text, what="refusal")
    assert "credential_refused" in error
    assert page.find_element(By.ID, "who").text == "not logged in"
    screenshot(page, "01-login-refused")
    page.find_element(By.ID, "credential").send_keys(CREDENTIAL)
    page.find_element(By.ID, "login").click()
    wait_for(lambda: page.find_element(By.ID, "who").text == "logged in as alice", what="login")
    assert page.get_cookie("tether_session")["httpOnly"] is True
    assert page.execute_script("return document.cookie") == ""  # HttpOnly: not for scripts
    # The Stop button is the first thing the keyboard reaches (the first focusable element).
    first = page.execute_script(
        "return document.querySelector('button, input, a[href], select, textarea, [tabindex]').id"
    )
    assert first == "stop-all"


def test_a_move_parked_by_a_power_loss_appears_live_with_its_evidence(
    host: Host, page: Any
) -> None:
    key = host.park("browser-move")
    decision = wait_for(lambda: card(page, key), what="the parked card")
    assert "device_state_lost_or_moved" in decision.text and "revision 1" in decision.text
    row = decision.find_element(By.CSS_SELECTOR, 'tr[data-joint="a"]')
    assert "57.30\u00b0 (1.0002 rad)" in row.find_element(By.CSS_SELECTOR, "td.commanded").text
    assert "rad" in row.find_element(By.CSS_SELECTOR, "td.present").text
    assert "tick" not in decision.text
    assert "read-back at" in decision.text and "staged and sent" in decision.text
    # Activity content is text: the daemon's store state, rendered with textContent.
    activity = wait_for(
        lambda: page.find_element(By.CSS_SELECTOR, f'div.activity[data-id="{key}"]'),
        what="the activity",
    )
    assert "browser-move" in activity.text
    screenshot(page, "02-parked-evidence")


def test_reissue_on_a_stale_revision_is_refused_then_the_fresh_one_runs_one_action(
    host: Host, page: Any
) -> None:
    (parked,) = host.client.status()["parked"]
    key = parked["key"]
    assert parked["revision"] == 1
    host.emu.request(op="set_present", id=1, ticks=tables.radians_to_ticks(0.4))  # by hand
    before = host.emu.journal()
    click(page, f'div.decision[data-key="{key}"] button.decide.reissue')
    refused = wait_for(
        lambda: (c := shown(page, key)) and "REFUSED" in c["text"] and c, what="the refusal"
    )
    assert "state_changed" in refused["text"]
    assert refused["revision"] == "2"
    assert "changed since revision 1" in refused["text"]  # the difference is shown
    by_hand = tables.ticks_to_radians(tables.radians_to_ticks(0.4))
    assert "position_rad" in refused["since"]
    assert f"{math.degrees(by_hand):.2f}\u00b0" in refused["since"]
    assert f"{by_hand:.4f} rad" in refused["present_a"]
    assert target_actions(host.emu.journal(), GOALS) == target_actions(before, GOALS)
    screenshot(page, "03-stale-refused")
    assert shown(page, key)["button_revision"] == "2"  # bound to the revision shown
    click(page, f'div.decision[data-key="{key}"] button.decide.reissue')
    logged = wait_for(
        lambda: (
            "reissue recorded by alice on revision 2" in text(page, "decision-log")
            and text(page, "decision-log")
        ),
        what="the decision",
    )
    assert key in logged
    done = host.wait(key, ("done",), timeout=90)
    assert done["state"] == "done"
    after = target_actions(host.emu.journal(), GOALS)
    assert {i: after[i] - n for i, n in target_actions(before, GOALS).items()} == {1: 1, 2: 1}
    wait_for(
        lambda: not page.find_elements(By.CSS_SELECTOR, f'div.decision[data-key="{key}"]'),
        what="the decision leaving the list",
    )
    screenshot(page, "04-reissued")


def _still(host: Host) -> bool:
    return all(not host.emu.request(op="snapshot", id=i)["moving"] for i in (1, 2))


def test_stop_while_a_move_runs_stops_the_motion_and_shows_the_latch(host: Host, page: Any) -> None:
    key = host.submit("browser-long", {"a": -1.4, "b": 1.4})
    host.wait(key, ("moving",))
    assert not _still(host)
    result = stop_all(page)
    assert "arm stopped" in result and "a: held" in result and "b: held" in result
    stopped_at = len(host.emu.journal())
    wait_for(lambda: _still(host), timeout=5, what="the shafts to stand still")
    held = [host.emu.request(op="snapshot", id=i) for i in (1, 2)]
    assert all(s["torque_enable"] == 1 for s in held)
    assert all(abs(s["goal_position"] - s["present_position"]) <= 2 for s in held)
    assert all(abs(s["present_position"] - tables.radians_to_ticks(-1.4)) > 50 for s in held[:1])
    latched = wait_for(
        lambda: page.execute_script(
            "const c = document.querySelector('div.device[data-robot=\"arm\"]');"
            "const b = c && c.querySelector('.latched');"
            "const a = c && c.querySelector('tr[data-joint=\"a\"] td.after-stop');"
            "return b && a && [b.textContent, a.textContent];"
        ),
        what="the latch badge",
    )
    assert "LATCHED" in latched[0] and latched[1] == "held"
    parked = host.wait(key, ("awaiting_decision",))
    assert parked["reason"] == "stopped_by_operator"
    time.sleep(0.5)
    effectful = [
        e
        for e in host.emu.journal()[stopped_at:]
        if e["instruction"] in ("write", "reg_write", "action", "sync_write")
    ]
    assert effectful == []  # nothing moved after the stop
    screenshot(page, "05-stopped-latched")


def test_a_card_keeps_what_the_operator_set_and_a_resume_clears_the_old_stop(
    host: Host, page: Any
) -> None:
    """The device card is rebuilt at every devices event (about each second): the arm-supported
    tick and an action's answer stay. Once the robot is resumed, this page's earlier stop
    report is gone (it said the arm was latched)."""
    assert "latched" in text(page, "stop-result")  # the stop of the test before
    click(page, 'div.device[data-robot="arm"] input.arm-supported')
    time.sleep(2.5)  # two devices events or more
    assert page.execute_script(
        "return document.querySelector('div.device[data-robot=\"arm\"] input.arm-supported')"
        ".checked"
    )
    click(page, 'div.device[data-robot="arm"] button.resume')
    wait_for(
        lambda: (
            "resume done"
            in page.execute_script(
                "return document.querySelector('div.device[data-robot=\"arm\"] .result')"
                ".textContent"
            )
        ),
        what="the resume's answer",
    )
    wait_for(lambda: text(page, "stop-result") == "", what="the old stop report cleared")
    time.sleep(2.5)
    kept = page.execute_script(
        "const c = document.querySelector('div.device[data-robot=\"arm\"]');"
        "return [c.querySelector('.result').textContent, !!c.querySelector('.latched'),"
        " c.querySelector('tr[data-joint=\"a\"] td.after-stop').textContent];"
    )
    assert kept == ["resume done", False, "-"], kept
    assert host.client.status()["devices"][0]["latched"] is False


def test_a_failed_result_reads_as_failed_not_settled(page: Any) -> None:
    """An abandoned move settles with a failed result: its activity card says it failed and is
    marked abnormal, never shown as a settled success."""
    shown = page.execute_script(
        "const node = document.createElement('div');"
        "renderActivity({id: 'm', activityType: 'physical_ai.robot_move.absolute',"
        " content: {state: 'settled', failed: true}}, node);"
        "return [node.className, node.querySelector('p.meta').textContent];"
    )
    assert "abnormal" in shown[0] and shown[1].endswith("settled (failed)"), shown
    ok = page.execute_script(
        "const node = document.createElement('div');"
        "renderActivity({id: 'n', activityType: 'x', content: {state: 'settled'}}, node);"
        "return node.className;"
    )
    assert "abnormal" not in ok


def test_stop_works_while_logged_out_from_loopback(host: Host, page: Any) -> None:
    page.find_element(By.ID, "logout").click()
    wait_for(lambda: page.find_element(By.ID, "who").text == "not logged in", what="logout")
    assert page.find_element(By.CSS_SELECTOR, "button.decide").get_attribute("disabled")
    before = len(host.emu.journal())
    page.execute_script("document.getElementById('stop-result').textContent = ''")
    page.find_element(By.ID, "stop-all").send_keys(Keys.ENTER)  # from the keyboard
    result = wait_for(
        lambda: (
            "latched" in page.find_element(By.ID, "stop-result").text
            and page.find_element(By.ID, "stop-result").text
        ),
        what="the stop answer",
    )
    assert "arm stopped" in result
    assert len(host.emu.journal()) > before  # the stop's frames went out
    assert host.client.status()["devices"][0]["latched"] is True
    screenshot(page, "06-stop-logged-out")


def test_stop_works_while_the_live_stream_is_down(host: Host, page: Any) -> None:
    """Stop is its own request: with the page's event stream closed it still stops."""
    page.execute_script("state.live.close()")
    assert page.execute_script("return state.live.readyState") == 2  # CLOSED
    page.execute_script("document.getElementById('stop-result').textContent = ''")
    page.find_element(By.ID, "stop-all").click()
    wait_for(lambda: "arm stopped" in page.find_element(By.ID, "stop-result").text, what="the stop")


def test_a_stop_is_sent_however_many_tabs_hold_a_live_feed(host: Host) -> None:
    """A browser opens six connections to one host over HTTP/1.1, shared by its tabs, and each
    tab's live feed holds one: with six tabs open, a stop clicked in one waited behind the
    feeds ("stopping every robot..."), silently, and nothing was stopped."""
    with chromium() as driver:
        driver.get(host.url)
        for _ in range(5):
            driver.switch_to.new_window("tab")
            driver.get(host.url)
            wait_for(lambda: driver.find_element(By.ID, "stop-all").is_displayed(), what="page")
        before = len(host.emu.journal())
        result = stop_all(driver, timeout=20)
    assert "latched until an operator resumes it" in result, result
    assert len(host.emu.journal()) > before  # the stop's frames went out
    assert host.client.status()["devices"][0]["latched"] is True


def test_a_decision_the_daemon_never_answers_is_said_so(tmp_path: Any) -> None:
    """A decision clicked while the daemon was down or restarting showed nothing (an uncaught
    "Failed to fetch" in the browser's log): the operator could believe it was recorded."""
    from tether._exit import OK

    with console_host(tmp_path, speed_scale=1.0) as own, chromium() as driver:
        key = own.park("down")
        driver.get(own.url)
        driver.find_element(By.ID, "credential").send_keys(CREDENTIAL)
        driver.find_element(By.ID, "login").click()
        wait_for(lambda: driver.find_element(By.ID, "who").text == "logged in as alice")
        wait_for(lambda: shown(driver, key), what="the parked card")
        own.proc.terminate()  # the daemon goes away; the page stays
        assert own.proc.wait(timeout=60) == OK
        click(driver, f'div.decision[data-key="{key}"] button.decide.abandon')
        said = wait_for(
            lambda: (c := shown(driver, key)) and "NO ANSWER" in c["text"] and c["text"],
            what="the page saying the daemon did not answer",
        )
    assert "may or may not be recorded" in said, said


def test_a_card_whose_read_back_is_too_old_offers_only_a_wait(tmp_path: Any) -> None:
    """The page got `too_old` with each card and ignored it: a card past the age bound kept
    its decision buttons, each click refused `evidence_too_old` by the daemon."""
    with console_host(tmp_path, speed_scale=1.0, max_age_s=2) as own, chromium() as driver:
        key = own.park("old")
        driver.get(own.url)
        driver.find_element(By.ID, "credential").send_keys(CREDENTIAL)
        driver.find_element(By.ID, "login").click()
        wait_for(lambda: driver.find_element(By.ID, "who").text == "logged in as alice")
        said = wait_for(
            lambda: driver.execute_script(
                "const c = [...document.querySelectorAll('div.decision')]"
                "  .find((n) => n.dataset.key === arguments[0]);"
                "const p = c && c.querySelector('.too-old'); return p && p.textContent;",
                key,
            ),
            what="the card saying its read-back is too old",
        )
        enabled = driver.execute_script(
            "const c = [...document.querySelectorAll('div.decision')]"
            "  .find((n) => n.dataset.key === arguments[0]);"
            "return [...c.querySelectorAll('button.decide')]"
            "  .filter((b) => !b.disabled).map((b) => b.dataset.decision);",
            key,
        )
    assert "Re-read device" in said
    assert enabled == ["wait"], enabled
