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
from consolekit import (
    WAIT_S,
    P,
    as_key,
    b64,
    flash,
    ok,
    posted_status,
    shoot,
    sign_in,
    wait,
)
from selenium.webdriver.common.by import By
from support import Server

from jobs import compact, gc
from jobs.common import JobContext

DEAD_LETTER_ATTEMPTS = 5


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
    assert posted_status(browser, f"{sub}/truncate") == 403
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


def _drain(admin: httpx.Client, sub: str) -> list[bytes]:
    """Pull and acknowledge until ``sub`` delivers nothing; the data delivered."""
    data: list[bytes] = []
    while True:
        got = ok(admin.post(f"{P}/subscriptions/{sub}:pull", json={"maxMessages": 100}))
        received = got.get("receivedMessages", [])
        if not received:
            return data
        ok(admin.post(f"{P}/subscriptions/{sub}:acknowledge",
                      json={"ackIds": [r["ackId"] for r in received]}))  # fmt: skip
        data += [base64.b64decode(r["message"].get("data", "")) for r in received]


def test_snapshots_are_listed_created_and_sought_to(
    browser: Any, console_server: Server, admin: httpx.Client, demo: threading.Event
) -> None:
    url = console_server.url
    sub = f"{url}/console/subscriptions/demo/audit-sub"
    sign_in(browser, console_server, "viewer-key")
    browser.get(sub)
    assert not browser.find_elements(By.ID, "create-snapshot")
    assert posted_status(browser, f"{sub}/snapshot", "snapshot=by-viewer") == 403
    assert posted_status(browser, f"{sub}/seek-snapshot", "snapshot=x") == 403

    _drain(admin, "audit-sub")
    sign_in(browser, console_server, "admin-key")
    browser.get(sub)
    assert browser.find_elements(By.ID, "no-snapshots")
    browser.find_element(By.CSS_SELECTOR, "#create-snapshot input[name=snapshot]").send_keys(
        "audit-before"
    )
    browser.find_element(By.CSS_SELECTOR, "#create-snapshot button").click()
    assert flash(browser).startswith("Created snapshot projects/demo/snapshots/audit-before")

    browser.get(f"{url}/console/snapshots")
    rows = browser.find_elements(By.CSS_SELECTOR, "#snapshots tr")
    assert len(rows) == 2  # header + audit-before
    assert "projects/demo/topics/audit" in rows[1].text and "demo/audit-sub" in rows[1].text
    assert "expired" not in rows[1].text
    shoot(browser, "snapshots")
    browser.find_element(By.ID, "q").send_keys("clicks\n")
    wait(browser, lambda d: "q=clicks" in d.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#snapshots tr")) == 1
    browser.get(f"{url}/console/snapshots?q=topics/audit")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#snapshots tr")) == 2

    # A message published and acknowledged since is delivered again after seeking back.
    ok(admin.post(f"{P}/topics/audit:publish", json={"messages": [{"data": b64("later")}]}))
    deadline = time.monotonic() + WAIT_S
    while b"later" not in _drain(admin, "audit-sub"):
        assert time.monotonic() < deadline
    browser.get(sub)
    browser.find_element(By.CSS_SELECTOR, "#seek-snapshot button").click()
    assert flash(browser) == "Sought to snapshot projects/demo/snapshots/audit-before."
    # (With what was still leased, unacknowledged, when the snapshot was taken.)
    assert b"later" in _drain(admin, "audit-sub")


def _exhaust(admin: httpx.Client, sub: str, count: int) -> None:
    """Nack what ``sub`` delivers until ``count`` messages were dead-lettered."""
    deadline = time.monotonic() + WAIT_S
    delivered: dict[str, int] = {}
    while True:
        assert time.monotonic() < deadline, delivered
        got = ok(admin.post(f"{P}/subscriptions/{sub}:pull", json={"maxMessages": 10}))
        received = got.get("receivedMessages", [])
        for r in received:
            delivered[r["message"]["messageId"]] = r["deliveryAttempt"]
        if received:
            ids = [r["ackId"] for r in received]
            ok(admin.post(f"{P}/subscriptions/{sub}:modifyAckDeadline",
                          json={"ackIds": ids, "ackDeadlineSeconds": 0}))  # fmt: skip
        elif len(delivered) >= count and min(delivered.values()) >= DEAD_LETTER_ATTEMPTS:
            return  # delivered that often, then not again: dead-lettered


def test_dead_letters_are_replayed_to_the_topic_and_refused_for_a_viewer(
    browser: Any, console_server: Server, admin: httpx.Client, demo: threading.Event
) -> None:
    ok(admin.put(f"{P}/topics/orders"))
    ok(admin.put(f"{P}/topics/orders-dead"))
    policy = {
        "deadLetterTopic": "projects/demo/topics/orders-dead",
        "maxDeliveryAttempts": DEAD_LETTER_ATTEMPTS,
    }
    body = {"topic": "projects/demo/topics/orders", "deadLetterPolicy": policy}
    ok(admin.put(f"{P}/subscriptions/orders-sub", json=body))
    ok(admin.put(f"{P}/subscriptions/orders-dead-sub",
                 json={"topic": "projects/demo/topics/orders-dead"}))  # fmt: skip
    messages = [
        {"data": b64("order 1"), "attributes": {"n": "1"}, "orderingKey": "customer-9"},
        {"data": b64("order 2"), "attributes": {"n": "2"}, "orderingKey": "customer-9"},
    ]
    ok(admin.post(f"{P}/topics/orders:publish", json={"messages": messages}))
    _exhaust(admin, "orders-sub", 2)

    url = console_server.url
    sub = f"{url}/console/subscriptions/demo/orders-sub"
    sign_in(browser, console_server, "viewer-key")
    browser.get(sub)
    assert not browser.find_elements(By.ID, "replay")
    source = "projects/demo/subscriptions/orders-dead-sub"
    assert posted_status(browser, f"{sub}/replay", f"source={source}") == 403

    sign_in(browser, console_server, "admin-key")
    deadline = time.monotonic() + WAIT_S
    while True:  # the dead-letter subscription's dispatcher may not have read them yet
        browser.get(sub)
        options = browser.find_element(By.CSS_SELECTOR, "#replay select").text
        assert "orders-dead-sub" in options
        browser.find_element(By.CSS_SELECTOR, "#replay button").click()
        said = flash(browser)
        if not said.startswith("Nothing replayed") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert said.startswith("Replayed 2 dead-lettered messages from " + source), said
    shoot(browser, "replay")

    got = ok(admin.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 10}))
    replayed = sorted(got["receivedMessages"], key=lambda r: r["message"]["attributes"]["n"])
    assert [base64.b64decode(r["message"]["data"]) for r in replayed] == [b"order 1", b"order 2"]
    for r in replayed:
        attributes = r["message"]["attributes"]
        assert attributes["lakepubsub.replayed_from"].startswith(
            "projects/demo/topics/orders-dead@"
        )
        assert not [k for k in attributes if k.startswith("CloudPubSubDeadLetter")]
        assert r["message"]["orderingKey"] == "customer-9"
    # Acknowledged in the dead-letter subscription: a second replay finds nothing.
    browser.get(sub)
    browser.find_element(By.CSS_SELECTOR, "#replay button").click()
    assert flash(browser).startswith("Nothing replayed")


def test_the_lake_page_shows_compactions_and_the_jobs_last_runs(
    browser: Any, console_server: Server, demo: threading.Event
) -> None:

    with JobContext(console_server.lake.settings()) as ctx:
        ran = compact.run(ctx, compact.CompactOptions(min_small_files=2, vacuum=False))
        gc.run(ctx)
    compacted = [t for t in ran.tables if t.kind == "messages" and t.files_removed]
    assert any(t.name == "projects/demo/topics/clicks" for t in compacted), ran.tables

    sign_in(browser, console_server, "admin-key")
    browser.get(f"{console_server.url}/console/lake")

    def clicks_row(d: Any) -> str:
        rows = d.find_elements(By.CSS_SELECTOR, "#tables tr")
        text: str = next((r.text for r in rows if "topic demo/clicks" in r.text), "")
        return text

    wait(browser, lambda d: " files into 1, " in clicks_row(d))
    wait(browser, lambda d: "gc no run recorded" not in d.find_element(By.ID, "jobs").text)
    jobs = browser.find_element(By.ID, "jobs").text
    assert "compacted" in jobs and "subscriptions deleted 0" in jobs
    assert "topic projects/demo/topics/clicks" in jobs
    assert "truncate no run recorded" in jobs
    assert browser.find_element(By.ID, "s3").text == "A local lake: there are no S3 requests."
    shoot(browser, "lake")
