"""The lake page of a server on S3 (moto), in the browser: this process's S3 requests
per minute, by kind, and what a month of them costs at list prices."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from consolekit import P, as_key, b64, key_config, ok, shoot, sign_in, wait
from selenium.webdriver.common.by import By
from support import LakeSpec, MotoServer, Server, start_server, stop_server

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def s3_server(moto_server: MotoServer) -> Iterator[Server]:
    lake = LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", moto_server.storage_options)
    server = start_server(
        lake,
        extra_env={
            "LAKEPUBSUB_API_KEYS": key_config(),
            "LAKEPUBSUB_CONSOLE_SAMPLE_S": "1",
            "LAKEPUBSUB_PUSH": "false",
        },
    )
    try:
        yield server
    finally:
        stop_server(server)


def test_the_lake_page_counts_this_process_s3_requests(browser: Any, s3_server: Server) -> None:
    with httpx.Client(base_url=s3_server.url, headers=as_key("admin"), timeout=60) as admin:
        ok(admin.put(f"{P}/topics/events"))
        ok(
            admin.put(
                f"{P}/subscriptions/events-sub", json={"topic": "projects/demo/topics/events"}
            )
        )
        for n in range(5):
            body = {"messages": [{"data": b64(f"event {n}")}]}
            ok(admin.post(f"{P}/topics/events:publish", json=body))
    sign_in(browser, s3_server, "admin-key")
    browser.get(f"{s3_server.url}/console/lake?window=5")

    def rated(d: Any) -> bool:
        rate = d.find_element(By.ID, "s3-rate").text.replace(",", "")
        return rate not in ("", "-") and float(rate) > 0

    wait(browser, rated)
    kinds = browser.find_element(By.ID, "s3-kinds").text
    assert "PUT" in kinds and "GET" in kinds and "$0.005" in kinds
    assert browser.find_element(By.ID, "s3-month").text.startswith("$")
    assert "not counted" in browser.find_element(By.TAG_NAME, "main").text
    shoot(browser, "lake-s3")
