"""Creating topics and subscriptions while storage faults hit the Delta commits.

A create that answers 200 must leave a usable resource; one that fails may or
may not have created it, but whatever exists afterwards must work: a topic that
GET finds accepts a publish, a subscription that GET finds answers a pull.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from tests.chaos.proxy import Faults, ProxyProcess
from tests.chaos.workload import PROJECT

# Commit-targeted faults, mostly the ambiguous kind (the write lands, the answer is lost).
ADMIN_COMMIT_FAULTS = Faults(error=0.1, error_after=0.3, drop_after=0.2)
CREATE_TIMEOUT_S = 120.0


@dataclass
class AdminOutcome:
    creates: dict[str, int] = field(default_factory=dict)  # resource path -> status
    broken: list[str] = field(default_factory=list)  # what exists but does not work, and why
    server_errors: list[str] = field(default_factory=list)  # 5xx other than 503


def run(url: str, proxy: ProxyProcess, *, pairs: int) -> AdminOutcome:
    """Create ``pairs`` topics with one subscription each under commit faults, then audit."""
    out = AdminOutcome()
    base = f"{url}/v1/projects/{PROJECT}"
    with httpx.Client(base_url=base, timeout=CREATE_TIMEOUT_S) as client:
        proxy.configure(enabled=True, faults=Faults(), commit_faults=ADMIN_COMMIT_FAULTS)
        try:
            for i in range(pairs):
                topic, sub = f"topics/admin-topic-{i}", f"subscriptions/admin-sub-{i}"
                _create(client, out, topic, {})
                body = {"topic": f"projects/{PROJECT}/{topic}", "enableExactlyOnceDelivery": True}
                _create(client, out, sub, body)
        finally:
            proxy.configure(enabled=False)
        for path, status in out.creates.items():
            _audit(client, out, path, status)
    return out


def _create(client: httpx.Client, out: AdminOutcome, path: str, body: dict[str, object]) -> None:
    try:
        response = client.put(f"/{path}", json=body)
    except httpx.HTTPError as exc:
        out.creates[path] = 0
        out.server_errors.append(f"PUT {path}: {type(exc).__name__}")
        return
    out.creates[path] = response.status_code
    if response.status_code >= 500 and response.status_code != 503:
        out.server_errors.append(f"PUT {path}: {response.status_code} {response.text[:200]}")


def _audit(client: httpx.Client, out: AdminOutcome, path: str, status: int) -> None:
    found = client.get(f"/{path}").status_code
    if status == 200 and found != 200:
        out.broken.append(f"{path}: created with 200, GET answers {found}")
    if found != 200:
        return
    if path.startswith("topics/"):
        body: dict[str, object] = {"messages": [{"data": "YWRtaW4="}]}
        response = client.post(f"/{path}:publish", json=body)
    else:
        response = client.post(f"/{path}:pull", json={"maxMessages": 1, "returnImmediately": True})
    if response.status_code != 200:
        out.broken.append(
            f"{path}: create answered {status}, GET 200, but {response.request.url.path} "
            f"answers {response.status_code}: {response.text[:160]}"
        )
