"""The chat page (web/) in a real browser: Debian's headless Chromium driven by Selenium against
a real `mpakt serve` and `mpakt host` (the fixtures in conftest.py). It signs in, loads
stories260K, streams a reply, stops a long one, shows the server's error for a bad key, and
fits a 390 px wide phone screen.

Needs the Debian packages chromium and chromium-driver and the PyPI package selenium; the
module is skipped, saying which is missing, only when they are not installed. Selenium is
pointed at /usr/bin/chromedriver and /usr/bin/chromium so that it never downloads a browser.
"""
from __future__ import annotations

import os
import time

import pytest

from e2e_util import expect

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

_missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
if _missing:
    pytest.skip(f"the browser tests need {' and '.join(_missing)} (Debian packages chromium and chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests need the PyPI package selenium")

from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PASSWORD = "a long password"
STORIES = "hf:local/stories260K"
PHONE = (390, 844)

# Records, in the page, the assistant bubble's text length at every change of the message list,
# and whether the reply's done line (tokens/s) was shown by then.
WATCH_REPLY = """
window.__replyLengths = [];
new MutationObserver(() => {
  const bubbles = document.querySelectorAll('[data-testid=assistant-message]');
  const b = bubbles[bubbles.length - 1];
  if (!b) return;
  window.__replyLengths.push([b.querySelector('[data-testid=message-content]').textContent.length,
                              !!b.querySelector('[data-testid=tokens-per-second]')]);
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
              f"--window-size={PHONE[0]},{PHONE[1]}"):
        options.add_argument(a)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def user(server):
    """An approved account made through the API; the page signs in with its name and password."""
    server.sign_up("webpage", PASSWORD)
    return "webpage"


@pytest.fixture(scope="module")
def key(server, user):
    """A key of that account, for calls the test makes itself (status) and for pasting."""
    return server.new_key(server.login(user, PASSWORD), label="page test")


@pytest.fixture
def page(browser, server):
    """The page, fresh: nothing kept in the browser, no network throttling, phone size."""
    browser.set_window_size(*PHONE)
    browser.get(server.base_url + "/")
    browser.execute_script("localStorage.clear(); sessionStorage.clear();")
    browser.get(server.base_url + "/")
    yield browser
    try:
        browser.delete_network_conditions()
    except Exception:
        pass


# --------------------------------------------------------------------------- helpers


def by_id(d, ident):
    return d.find_element(By.ID, ident)


def wait_for(d, what, timeout=10.0, message="", detail=None):
    """`detail`: a callable describing the page when the wait fails (for the failure message)."""
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: what())
    except TimeoutException:
        err = banner_text(d)
        pytest.fail(f"{message or 'the page did not get there'} within {timeout:g} s"
                    + (f"; the page shows the error: {err}" if err else "")
                    + (f"; {detail()}" if detail else ""), pytrace=False)


def banner_text(d):
    b = d.find_elements(By.ID, "error-banner")
    return b[0].text if b and b[0].is_displayed() else ""


def sign_in(d, username):
    by_id(d, "login-username").send_keys(username)
    by_id(d, "login-password").send_keys(PASSWORD)
    by_id(d, "login-submit").click()
    wait_for(d, lambda: by_id(d, "workspace").is_displayed(), message="signing in did not show the chat")


def use_key(d, key):
    by_id(d, "key-input").send_keys(key)
    by_id(d, "key-submit").click()


def last_reply(d):
    return d.find_elements(By.CSS_SELECTOR, "[data-testid=assistant-message]")[-1]


def reply_text(d):
    return d.execute_script(
        "const b = document.querySelectorAll('[data-testid=assistant-message]');"
        "return b.length ? b[b.length - 1].querySelector('[data-testid=message-content]').textContent : '';")


def set_number(d, ident, value):
    """Sets an <input type=number> the way a user would: clear it and type."""
    el = by_id(d, ident)
    d.execute_script("arguments[0].value = ''", el)
    el.send_keys(str(value))


def send(d, text):
    box = by_id(d, "prompt")
    box.clear()
    box.send_keys(text)
    by_id(d, "send-button").click()


def generations(server, key):
    return expect(server.api.get("/api/v3/status", key=key), 200)["generations"]


# --------------------------------------------------------------------------- tests


def test_sign_in_load_and_stream_a_reply(page, server):
    # An account of its own: the Load button must really load, whatever other tests loaded.
    user = "webpage_load"
    server.sign_up(user, PASSWORD)
    d = page
    sign_in(d, user)
    assert user in by_id(d, "account-status").text
    assert d.execute_script("return localStorage.getItem('mpakt.key')").startswith("mpk_")

    # Load: the progress bar shows while POST /api/v3/models runs, then the transfer figures.
    assert by_id(d, "source-input").get_attribute("value") == STORIES
    d.execute_script("""
        window.__progressShown = false;
        const p = document.getElementById('load-progress');
        new MutationObserver(() => { if (!p.hidden) window.__progressShown = true; })
            .observe(p, {attributes: true, attributeFilter: ['hidden']});""")
    by_id(d, "load-button").click()
    wait_for(d, lambda: "Loaded" in by_id(d, "load-result").text, 30, "the Load button did not report a loaded model")
    result = by_id(d, "load-result").text
    assert "MB" in result and "MB/s" in result and "quantize none" in result, result
    assert d.execute_script("return window.__progressShown"), "no progress bar while loading"
    assert not by_id(d, "load-progress").is_displayed()
    model_id = by_id(d, "model-select").get_attribute("value")
    assert model_id.startswith("m_"), model_id
    models = expect(server.api.get("/api/v3/models", key=d.execute_script("return localStorage.getItem('mpakt.key')")),
                    200)["models"]
    assert [m["source"] for m in models if m["modelId"] == model_id] == [STORIES]

    # A loopback reply from this tiny model takes milliseconds; throttle the browser's network
    # (about 100 ms per 400 bytes) so that the deltas arrive spread out, as over a real network.
    d.set_network_conditions(offline=False, latency=5, download_throughput=4000, upload_throughput=1_000_000)
    d.execute_script(WATCH_REPLY)
    send(d, "Once upon a time")
    wait_for(d, lambda: by_id(d, "stop-button").is_displayed() or d.find_elements(
        By.CSS_SELECTOR, "[data-testid=tokens-per-second]"), 5, "Send did not start a reply")
    seen = set()
    deadline = time.monotonic() + 30
    while not d.find_elements(By.CSS_SELECTOR, "[data-testid=tokens-per-second]"):
        assert time.monotonic() < deadline, "no done line within 30 s"
        seen.add(len(reply_text(d)))
        time.sleep(0.05)
    d.delete_network_conditions()

    lengths = d.execute_script("return window.__replyLengths")
    growing = sorted({n for n, done in lengths if n > 0 and not done} | (seen - {0}))
    assert len(growing) >= 2, f"the reply did not grow while streaming; lengths seen before done: {growing}"
    reply = last_reply(d)
    assert reply.get_attribute("data-state") == "done"
    text = reply_text(d)
    assert len(text) > max(growing) - 1 and text.strip()
    assert "tokens/s" in reply.find_element(By.CSS_SELECTOR, "[data-testid=tokens-per-second]").text
    finish = reply.find_element(By.CSS_SELECTOR, "[data-testid=finish-reason]").text
    assert "(length)" in finish or "(stop)" in finish, finish
    assert "%" in reply.find_element(By.CSS_SELECTOR, "[data-testid=acceptance]").text  # speculative is on
    assert by_id(d, "base-model-note").is_displayed()  # stories260K has the plain format
    assert not banner_text(d)
    assert by_id(d, "send-button").is_displayed() and not by_id(d, "stop-button").is_displayed()

    # The next turn sends the whole conversation; the server kept the last turn's session (the
    # prefix cache), and the reply says how much of the prompt was not prefilled again.
    send(d, " And then?")
    wait_for(d, lambda: len(d.find_elements(By.CSS_SELECTOR, "[data-testid=usage]")) >= 2, 30, "no second reply")
    usage = d.find_elements(By.CSS_SELECTOR, "[data-testid=usage]")[-1].text
    assert "kept from the last turn" in usage, usage
    wait_for(d, lambda: by_id(d, "send-button").is_displayed(), 10, "the second reply did not end")

    # Sign out forgets the key, and revokes it since the page made it.
    page_key = d.execute_script("return localStorage.getItem('mpakt.key')")
    by_id(d, "sign-out").click()
    wait_for(d, lambda: by_id(d, "login-form").is_displayed(), 5, "sign out did not show the sign-in form")
    assert d.execute_script("return localStorage.getItem('mpakt.key')") is None
    assert not d.find_elements(By.CSS_SELECTOR, "[data-testid=assistant-message]")
    deadline = time.monotonic() + 5
    while server.api.get("/api/v3/models", key=page_key).status != 401:
        assert time.monotonic() < deadline, "the page's key still works after sign out"
        time.sleep(0.1)


def test_stop_ends_a_long_generation(page, server, user, key, slow_model):
    d = page
    sign_in(d, user)
    # The fixture's 77 MB random model decodes a few hundred tokens of its 500 in a second or
    # more, so Stop lands mid-reply.
    by_id(d, "settings").find_element(By.TAG_NAME, "summary").click()
    set_number(d, "max-tokens", 500)
    d.execute_script("const s = document.getElementById('model-select'); s.value = '';"
                     "s.dispatchEvent(new Event('change'));")
    src = by_id(d, "source-input")
    src.clear()
    src.send_keys(slow_model)
    # The random model draws its end-of-text token now and then: about one reply in ten ends
    # by itself within the first 40 tokens (a third of a second here, less on a faster CPU),
    # before Stop can land — before the button shows, or between the click and the server's
    # stop. Nothing was stopped then; such a reply is marked done and the next one draws
    # another seed.
    for _ in range(6):
        send(d, "Once upon a time")
        wait_for(d, lambda: len(reply_text(d)) >= 3, 60, "no streamed text")
        if by_id(d, "stop-button").is_displayed():
            # (0 only when the reply ended by itself since the button showed: not stopped below)
            running = generations(server, key)
            assert running <= 1
            # A click through the page's script: text streaming above the button may move it
            # between Selenium finding it and clicking (the composer is sticky, but the race is
            # Selenium's).
            d.execute_script("arguments[0].click();", by_id(d, "stop-button"))
            wait_for(d, lambda: last_reply(d).get_attribute("data-state") in ("stopped", "done"), 5,
                     "the reply was not marked stopped",
                     detail=lambda: f"the reply is {last_reply(d).get_attribute('data-state')!r} "
                                    f"after {len(reply_text(d))} characters, its notes: {last_reply(d).text[-160:]!r}")
            if last_reply(d).get_attribute("data-state") == "stopped":
                assert running == 1, "the reply Stop ended was not counted as a generation"
                break
        else:
            wait_for(d, lambda: last_reply(d).get_attribute("data-state") == "done", 5, "a reply that ended was not done",
                     detail=lambda: f"the reply is {last_reply(d).get_attribute('data-state')!r}")
        # ended by itself: the model's end of text, not the button
        assert "(stop)" in last_reply(d).find_element(By.CSS_SELECTOR, "[data-testid=finish-reason]").text
    else:
        pytest.fail("six replies in a row ended by themselves before Stop could land")
    stopped_at = reply_text(d)
    assert stopped_at, "the partial text should stay"
    assert "stopped" in last_reply(d).find_element(By.CSS_SELECTOR, "[data-testid=stopped]").text
    assert by_id(d, "send-button").is_displayed() and not by_id(d, "stop-button").is_displayed()
    deadline = time.monotonic() + 5
    while generations(server, key) != 0:
        assert time.monotonic() < deadline, "the server still decodes 5 s after Stop"
        time.sleep(0.1)
    time.sleep(0.5)
    assert reply_text(d) == stopped_at, "the text kept growing after Stop"
    assert not last_reply(d).find_elements(By.CSS_SELECTOR, "[data-testid=tokens-per-second]")
    assert not banner_text(d), "stopping is not an error"
    server.assert_up()


def test_bad_key_shows_the_servers_message(page, server):
    d = page
    use_key(d, "k_bogus")
    wait_for(d, lambda: banner_text(d), 5, "no error shown for a bad key")
    message = expect(server.api.get("/api/v3/models", key="k_bogus"), 401)["error"]
    assert message in banner_text(d) and "401" in banner_text(d), banner_text(d)
    assert not by_id(d, "workspace").is_displayed()
    assert d.execute_script("return localStorage.getItem('mpakt.key')") is None

    # A kept key that stopped working (revoked, deactivated): the chat shows the 401 in the reply.
    d.execute_script("localStorage.setItem('mpakt.key', 'k_bogus')")
    d.get(server.base_url + "/")
    send(d, "Once upon a time")
    wait_for(d, lambda: last_reply(d).get_attribute("data-state") == "error", 5, "the failed reply was not shown")
    shown = last_reply(d).find_element(By.CSS_SELECTOR, "[data-testid=reply-error]").text
    assert message in shown and "401" in shown, shown
    assert message in banner_text(d)
    assert by_id(d, "prompt").get_attribute("value") == "Once upon a time"  # given back to retry


def test_sign_up_says_pending_approval(page):
    d = page
    by_id(d, "signup-username").send_keys("webnewcomer")
    by_id(d, "signup-password").send_keys(PASSWORD)
    by_id(d, "signup-submit").click()
    wait_for(d, lambda: by_id(d, "signup-result").text, 5, "no answer to the sign-up")
    assert "pending approval" in by_id(d, "signup-result").text
    assert by_id(d, "login-username").get_attribute("value") == "webnewcomer"
    by_id(d, "signup-password").send_keys(PASSWORD)  # the same name again: the server's 409 message
    by_id(d, "signup-submit").click()
    wait_for(d, lambda: "taken" in by_id(d, "signup-result").text, 5, "a taken name was not reported")


def test_phone_width_has_no_horizontal_scroll(page, server, key):
    d = page

    def overflow():
        return d.execute_script("const e = document.documentElement; return [e.scrollWidth, e.clientWidth];")

    assert d.execute_script("return window.innerWidth") <= PHONE[0]
    w, c = overflow()
    assert w <= c, f"signed out: the page is {w} px wide in a {c} px viewport"
    use_key(d, key)
    wait_for(d, lambda: by_id(d, "workspace").is_displayed(), 5, "the key was not accepted")
    by_id(d, "settings").find_element(By.TAG_NAME, "summary").click()
    set_number(d, "max-tokens", 16)
    send(d, "Once upon a time " + "x" * 300)  # one long unbroken word must wrap
    wait_for(d, lambda: d.find_elements(By.CSS_SELECTOR, "[data-testid=tokens-per-second]"), 30, "no reply")
    w, c = overflow()
    assert w <= c, f"signed in: the page is {w} px wide in a {c} px viewport"
    for ident in ("prompt", "send-button", "model-select", "load-button"):
        r = by_id(d, ident).rect
        assert r["x"] >= 0 and r["x"] + r["width"] <= c, f"#{ident} sticks out: {r}"
