"""Helpers for the console tests: API keys named after their role, where screenshots go,
and driving the browser."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support import Server

# Keys named after their role: the key itself is "<name>-key".
ROLES = {"admin": "roles/pubsub.admin", "viewer": "roles/pubsub.viewer"}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
P = "/v1/projects/demo"
# How long a page may take to show what a test waits for (the machine is shared).
WAIT_S = 60.0


def key_config() -> str:
    """``LAKEPUBSUB_API_KEYS`` for the keys of ``ROLES``, each granted on every project."""
    return json.dumps(
        {
            name: {
                "sha256": hashlib.sha256(f"{name}-key".encode()).hexdigest(),
                "roles": {"*": [role]},
            }
            for name, role in ROLES.items()
        }
    )


def as_key(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-key"}


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


def posted_status(driver: Any, url: str, body: str = "") -> int:
    """Post a form as the signed-in user's page would (same origin, its cookie)."""
    status: int = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', credentials: 'same-origin', body: arguments[1],"
        " headers: {'content-type': 'application/x-www-form-urlencoded'}})"
        ".then(r => done(r.status));",
        url,
        body,
    )
    return status


def flash(driver: Any) -> str:
    """What the action just done said (the page it redirected to shows it)."""
    wait(driver, lambda d: d.find_elements(By.ID, "flash") or d.find_elements(By.ID, "error"))
    errors = driver.find_elements(By.ID, "error")
    assert not errors, errors[0].text
    text: str = driver.find_element(By.ID, "flash").text
    return text


def shoot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1360, max(700, min(int(height) + 40, 2400)))
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1360, 900)
