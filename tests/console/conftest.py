"""A server with API keys for an admin and a viewer, and a headless Chromium driven by
Selenium through Debian's chromedriver (``make browser-deps`` installs both)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import httpx
import pytest
from consolekit import as_key, key_config
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from support import LakeSpec, Server, start_server, stop_server

# The console samples the lake this often in these tests (5 s by default).
SAMPLE_S = "1"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    lake = LakeSpec(str(tmp_path_factory.mktemp("lake")), {})
    server = start_server(
        lake,
        extra_env={
            "LAKEPUBSUB_API_KEYS": key_config(),
            "LAKEPUBSUB_CONSOLE_SAMPLE_S": SAMPLE_S,
            "LAKEPUBSUB_PUSH": "false",
            "LAKEPUBSUB_PEERING": "false",
        },
    )
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="module")
def admin(console_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console_server.url, headers=as_key("admin"), timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Chromium; the test fails (not skips) without one: CI installs it."""

    binary = next((b for b in CHROMIUM if shutil.which(b)), None)
    if binary is None or not shutil.which(CHROMEDRIVER):
        pytest.fail("no chromium/chromedriver: run `make browser-deps` (Debian packages)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1360,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
