"""The lake as it is stored, read directly (never through the fault proxy)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakepubsub import Engine, Settings, SubscriptionName, TopicName
from lakepubsub.publish.messages_table import MessagesTable
from tests.chaos.known import explain
from tests.chaos.servers import Lake
from tests.chaos.workload import PROJECT


class LakeView:
    """Reads a run's lake with its own engine. Use as a context manager."""

    def __init__(self, lake: Lake) -> None:
        self.engine = Engine(Settings(lake=lake.uri, storage_options=lake.options))

    def __enter__(self) -> LakeView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.close()

    def stored(self, topic: str) -> dict[str, str]:
        """Every message in the topic's table: message id -> payload."""
        uid = self.engine.get_topic(TopicName(PROJECT, topic)).uid
        table = MessagesTable(self.engine.lake, uid)
        rows = table.read_range(0, table.head()).select(["message_id", "data"]).to_pydict()
        return {
            mid: (data or b"").decode(errors="replace")
            for mid, data in zip(rows["message_id"], rows["data"], strict=True)
        }

    def drained(self, topic: str, sub: str) -> bool:
        """Whether the subscription has acknowledged everything published so far."""
        head = self.engine.topic_head(TopicName(PROJECT, topic))
        state = self.engine.subscription_state(SubscriptionName(PROJECT, sub))
        return not state.rows and state.cursor.frontier >= head


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    known: list[str] = field(default_factory=list)  # open bugs that explain the failure


@dataclass
class Result:
    """One scenario's outcome: named checks, invariant counts and report lines."""

    scenario: str
    checks: list[Check] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def check(
        self, name: str, ok: bool, detail: str = "", failures: list[str] | None = None
    ) -> None:
        """Record a check; ``failures`` (one line each) become the detail when given."""
        if failures is not None:
            detail = "; ".join(failures)
        known = explain(failures) if failures and not ok else []
        self.checks.append(Check(name, bool(ok), detail, known))

    @property
    def passed(self) -> int:
        return sum(1 for c in self.checks if c.ok)

    @property
    def failed(self) -> int:
        return sum(1 for c in self.checks if not c.ok)

    @property
    def unexplained(self) -> list[str]:
        """Failed checks that no known bug explains."""
        return [c.name for c in self.checks if not c.ok and not c.known]
