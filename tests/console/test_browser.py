"""The console in a real browser (headless Chromium): pages load, charts draw from
live data while a publisher runs, a message published a moment ago shows, actions
work for a user with the role and are refused for a viewer. Each page is also
written as a screenshot to docs/console/ for docs/console.md."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from consolekit import SCREENSHOTS, as_key
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support import Server

P = "/v1/projects/demo"
WAIT_S = 60.0


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def wait(driver: Any, condition: Any) -> Any:
    """Until ``condition(driver)``; the live parts of a page are replaced as it runs."""
    return WebDriverWait(
        driver, WAIT_S, poll_frequency=0.5, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition)


def sign_in(driver: Any, server: Server, key: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{server.url}/console/login")
    driver.find_element(By.NAME, "token").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()
    wait(driver, lambda d: "/console/topics" in d.current_url)


def shoot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1360, max(700, min(int(height) + 40, 2400)))
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1360, 900)


@pytest.fixture(scope="module")
def demo(admin: httpx.Client) -> Iterator[threading.Event]:
    """Topics, subscriptions and a schema; a publisher at about 20 msgs/s and a
    consumer acknowledging half of what it pulls, for the module's duration."""
    ok(
        admin.post(
            f"{P}/schemas",
            params={"schemaId": "orders"},
            json={
                "type": "AVRO",
                "definition": '{"type": "record", "name": "Order", "fields": '
                '[{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}]}',
            },
        )
    )
    ok(admin.put(f"{P}/topics/clicks", json={"labels": {"team": "web"}}))
    ok(admin.put(f"{P}/topics/dead-clicks"))
    ok(admin.put(f"{P}/topics/audit"))
    ok(
        admin.put(
            f"{P}/subscriptions/clicks-sub",
            json={
                "topic": "projects/demo/topics/clicks",
                "filter": 'attributes.page = "/cart"',
                "deadLetterPolicy": {
                    "deadLetterTopic": "projects/demo/topics/dead-clicks",
                    "maxDeliveryAttempts": 5,
                },
                "retryPolicy": {"minimumBackoff": "1s", "maximumBackoff": "30s"},
                "enableExactlyOnceDelivery": True,
                "truncationPolicy": {"maxBytes": 10_000_000},
            },
        )
    )
    ok(admin.put(f"{P}/subscriptions/clicks-all", json={"topic": "projects/demo/topics/clicks"}))
    ok(admin.put(f"{P}/subscriptions/audit-sub", json={"topic": "projects/demo/topics/audit"}))
    stop = threading.Event()

    def publish() -> None:
        n = 0
        while not stop.is_set():
            page = ("/home", "/cart")[n % 2]
            body = {
                "data": b64(f'{{"click": {n}, "page": "{page}"}}'),
                "attributes": {"page": page},
            }
            admin.post(f"{P}/topics/clicks:publish", json={"messages": [body]})
            n += 1
            stop.wait(0.05)

    def consume() -> None:
        while not stop.is_set():
            got = admin.post(f"{P}/subscriptions/clicks-all:pull", json={"maxMessages": 20})
            ids = [r["ackId"] for r in got.json().get("receivedMessages", [])]
            if ids[::2]:
                admin.post(f"{P}/subscriptions/clicks-all:acknowledge", json={"ackIds": ids[::2]})
            stop.wait(0.5)

    threads = [threading.Thread(target=f, daemon=True) for f in (publish, consume)]
    for t in threads:
        t.start()
    yield stop
    stop.set()
    for t in threads:
        t.join(timeout=30)


def test_pages_load_and_charts_draw_from_live_data(
    browser: Any, console_server: Server, demo: threading.Event
) -> None:
    sign_in(browser, console_server, "admin-key")
    url = console_server.url
    browser.get(f"{url}/console/topics/demo/clicks?window=1")
    # The live part refreshes itself: the published count grows without a reload,
    # and the publish-rate chart gets points.
    first = browser.find_element(By.ID, "head").text

    def charted(d: Any) -> bool:
        head = d.find_element(By.ID, "head").text
        charts = d.find_elements(By.CSS_SELECTOR, "svg.chart")
        points = int(charts[0].get_attribute("data-points") or 0) if charts else 0
        return head not in (first, "-") and points >= 15

    wait(browser, charted)
    points = browser.execute_script(
        "return document.querySelector('svg.chart polyline').getAttribute('points')"
    )
    assert len(points.split()) >= 3
    shoot(browser, "topic")

    browser.get(f"{url}/console/topics")
    rows = browser.find_elements(By.CSS_SELECTOR, "#topics tr")
    assert len(rows) == 4  # header + clicks, dead-clicks, audit
    browser.find_element(By.ID, "q").send_keys("dead\n")
    wait(browser, lambda d: "q=dead" in d.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#topics tr")) == 2
    browser.get(f"{url}/console/topics?window=1")
    shoot(browser, "topics")

    def backlog_charted(d: Any) -> bool:
        text = d.find_element(By.ID, "backlog").text.replace(",", "")
        return text.isdigit() and int(text) > 0

    browser.get(f"{url}/console/subscriptions/demo/clicks-all?window=1")
    wait(browser, backlog_charted)
    assert browser.execute_script("return document.querySelectorAll('svg.chart').length") == 4
    shoot(browser, "subscription")

    browser.get(f"{url}/console/subscriptions/demo/clicks-sub")
    settings = browser.find_element(By.ID, "settings").text
    for shown in (
        'attributes.page = "/cart"',
        "projects/demo/topics/dead-clicks after 5 attempts",
        "backoff 1-30 s",
        "maxBytes 10,000,000",
    ):
        assert shown in settings
    assert "Exactly once on" in settings

    browser.get(f"{url}/console/subscriptions?window=1")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#subscriptions tr")) == 4
    shoot(browser, "subscriptions")

    browser.get(f"{url}/console/schemas")
    schemas = browser.find_element(By.ID, "schemas").text
    assert "demo/orders" in schemas and "AVRO" in schemas
    shoot(browser, "schemas")

    browser.get(f"{url}/console/lake")
    # The catalog, 3 topics' messages and 3 subscriptions' lease tables (the
    # truncation log exists once something was truncated).
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tables tr")) >= 1 + 1 + 3 + 3)
    tables = browser.find_element(By.ID, "tables").text
    assert "topic demo/clicks" in tables and "subscription demo/audit-sub" in tables
    shoot(browser, "lake")


def test_browser_shows_a_message_published_a_moment_ago(
    browser: Any, console_server: Server, admin: httpx.Client, demo: threading.Event
) -> None:
    sign_in(browser, console_server, "admin-key")
    marker = uuid.uuid4().hex
    ok(
        admin.post(
            f"{P}/topics/audit:publish",
            json={
                "messages": [
                    {
                        "data": b64(f'{{"marker": "{marker}"}}'),
                        "attributes": {"who": "console-test"},
                        "orderingKey": "user-7",
                    }
                ]
            },
        )
    )
    browser.get(f"{console_server.url}/console/topics/demo/audit/messages?as=json")
    table = browser.find_element(By.ID, "messages").text
    assert marker in table and "user-7" in table and "who=console-test" in table
    shoot(browser, "messages")
    browser.get(
        f"{console_server.url}/console/topics/demo/clicks/messages?attr=page%3D%2Fcart&as=hex"
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
    assert rows and all("page=/cart" in r.text for r in rows)
    # Browsing touched no subscription: audit-sub still has the message to deliver.
    got = ok(admin.post(f"{P}/subscriptions/audit-sub:pull", json={"maxMessages": 10}))
    assert [base64.b64decode(r["message"]["data"]) for r in got["receivedMessages"]] == [
        f'{{"marker": "{marker}"}}'.encode()
    ]


def test_actions_work_and_are_refused_for_a_viewer(
    browser: Any, console_server: Server, admin: httpx.Client, demo: threading.Event
) -> None:
    url = console_server.url
    sub = f"{url}/console/subscriptions/demo/audit-sub"
    ok(admin.post(f"{P}/topics/audit:publish", json={"messages": [{"data": b64("x")}]}))

    sign_in(browser, console_server, "viewer-key")
    browser.get(sub)
    assert browser.find_elements(By.ID, "no-actions")
    assert not browser.find_elements(By.ID, "truncate")
    # Posting the form anyway, from the console's own origin with the viewer's cookie.
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', credentials: 'same-origin'})"
        ".then(r => done(r.status));",
        f"{sub}/truncate",
    )
    assert status == 403
    browser.get(f"{url}/console/topics/demo/audit/messages")
    assert browser.find_element(By.ID, "error").text.startswith("User not authorized")

    sign_in(browser, console_server, "admin-key")
    browser.get(sub)
    browser.find_element(By.CSS_SELECTOR, "#truncate button").click()
    wait(browser, lambda d: d.find_elements(By.ID, "flash"))
    assert browser.find_element(By.ID, "flash").text.startswith("Truncated offsets")
    # The event waits for the next pull; the page lists it once sampled.
    wait(browser, lambda d: "request" in d.find_element(By.ID, "truncations").text)
    got = ok(admin.post(f"{P}/subscriptions/audit-sub:pull", json={"maxMessages": 10}))
    assert got["receivedMessages"][0]["event"]["truncated"] is True

    # Seek back to before everything: the audit messages are delivered again.
    browser.get(sub)
    field = browser.find_element(By.CSS_SELECTOR, "#seek input[name=time]")
    browser.execute_script("arguments[0].value = '2020-01-01T00:00:00'", field)
    browser.find_element(By.CSS_SELECTOR, "#seek button").click()
    wait(browser, lambda d: d.find_elements(By.ID, "flash"))
    assert browser.find_element(By.ID, "flash").text.startswith("Sought to 2020-01-01")
    deadline = time.monotonic() + WAIT_S
    data: list[bytes] = []
    while time.monotonic() < deadline and b"x" not in data:
        got = ok(admin.post(f"{P}/subscriptions/audit-sub:pull", json={"maxMessages": 10}))
        data += [base64.b64decode(r["message"]["data"]) for r in got.get("receivedMessages", [])
                 if "message" in r and "data" in r["message"]]  # fmt: skip
    assert b"x" in data


def test_signed_out_pages_ask_for_a_key(console_server: Server) -> None:
    with httpx.Client(base_url=console_server.url, timeout=30) as anonymous:
        page = anonymous.get("/console/topics", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"].startswith("/console/login")
        wrong = anonymous.post("/console/login", data={"token": "nope"})
        assert wrong.status_code == 401
        viewer = httpx.Client(base_url=console_server.url, headers=as_key("viewer"), timeout=30)
        with viewer:
            assert viewer.get("/console/topics").status_code == 200
