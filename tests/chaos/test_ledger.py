"""The invariant checker flags what it should: lost, duplicated and overlapping deliveries."""

from __future__ import annotations

import re

from tests.chaos.known import KnownBug, explain
from tests.chaos.ledger import Delivery, LeaseChange, Ledger

PLAIN, ONCE = "plain", "once"


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.add_subscription(PLAIN, ack_deadline_s=10, exactly_once=False)
    ledger.add_subscription(ONCE, ack_deadline_s=10, exactly_once=True)
    ledger.publish_ok(["0", "1"], ["a", "b"])
    return ledger


def _deliver(ledger: Ledger, sub: str, message_id: str, ack_id: str, sent: float) -> None:
    ledger.delivered(sub, [Delivery(message_id, ack_id, 1, sent, sent + 0.1)])


def test_a_clean_run_has_no_violations() -> None:
    ledger = _ledger()
    for sub in (PLAIN, ONCE):
        _deliver(ledger, sub, "0", f"{sub}-a0", 100.0)
        _deliver(ledger, sub, "1", f"{sub}-a1", 100.0)
        ledger.acked(sub, ["0", "1"], 0, 101.0)
    found = ledger.check({"0": "a", "1": "b"})
    assert (found.published, found.acked, found.lost) == (2, 4, 0)
    assert found.duplicated_after_ack == found.acked_twice == found.live_lease_overlaps == 0


def test_missing_undelivered_and_wrong_payloads_count_as_lost() -> None:
    ledger = _ledger()
    _deliver(ledger, PLAIN, "0", "p0", 100.0)
    found = ledger.check({"0": "a", "1": "not b"})
    assert found.missing_from_topic == 1  # "1" stored with another payload
    assert found.undelivered == 3  # "1" on plain, both on exactly-once
    assert found.lost == 4


def test_delivery_after_a_successful_ack_is_a_duplicate() -> None:
    ledger = _ledger()
    _deliver(ledger, PLAIN, "0", "p0", 100.0)
    ledger.acked(PLAIN, ["0"], 0, 100.5)
    _deliver(ledger, PLAIN, "0", "p0-again", 120.0)  # pulled after the ack answered
    _deliver(ledger, PLAIN, "0", "p0-race", 100.2)  # pulled before: not a duplicate
    assert ledger.check({"0": "a", "1": "b"}).duplicated_after_ack == 1


def test_exactly_once_acked_twice() -> None:
    ledger = _ledger()
    _deliver(ledger, ONCE, "0", "o0", 100.0)
    ledger.acked(ONCE, ["0"], 0, 100.5)
    ledger.acked(ONCE, ["0"], 0, 100.6)
    ledger.acked(PLAIN, ["0"], 0, 100.5)
    ledger.acked(PLAIN, ["0"], 0, 100.6)  # allowed without exactly-once
    assert ledger.check({"0": "a", "1": "b"}).acked_twice == 1


def test_redelivery_while_the_lease_is_live_overlaps_unless_nacked() -> None:
    ledger = _ledger()
    _deliver(ledger, PLAIN, "0", "p0", 100.0)
    _deliver(ledger, PLAIN, "0", "p0-b", 105.0)  # lease lasts until >= 110
    _deliver(ledger, ONCE, "1", "o1", 100.0)
    ledger.changed(ONCE, "1", LeaseChange("o1", 0, 101.0))  # nacked at 101
    _deliver(ledger, ONCE, "1", "o1-b", 102.0)
    _deliver(ledger, PLAIN, "1", "p1", 100.0)
    _deliver(ledger, PLAIN, "1", "p1-b", 111.0)  # after the deadline
    assert ledger.check({"0": "a", "1": "b"}).live_lease_overlaps == 1


def test_known_bugs_explain_only_complete_failure_lists() -> None:
    bugs = [KnownBug("answer-lost", "a lost answer", re.compile(r"CommitFailedError"))]
    bug = "PUT topics/x: 500 internal error: CommitFailedError"
    assert explain([bug], bugs) == ["answer-lost"]
    assert explain([bug, "something new"], bugs) == []
    assert explain([bug]) == []  # no open bug is known today
