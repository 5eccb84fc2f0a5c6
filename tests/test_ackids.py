"""Ack ids: parsed in bulk, and looked up when this process issued them lately."""

from __future__ import annotations

from lakepubsub._lake import table_schemas
from lakepubsub.delivery import ackids
from lakepubsub.delivery.ackids import INVALID_ACK_ID, AckId, Issued, split_malformed
from lakepubsub.delivery.leases import Cursor, LeaseState
from lakepubsub.delivery.planner import Planner, Policy

NOW_US = 1_700_000_000_000_000


def test_issued_ids_are_found_as_they_parse_and_the_oldest_half_goes_when_full() -> None:
    issued = Issued(limit=10)
    texts = [f"0123abcd-m{o}-{o + 7}" for o in range(12)]
    issued.add(texts[:8], [AckId.parse(t) for t in texts[:8]])
    assert issued.find(texts[:8]) == [AckId.parse(t) for t in texts[:8]]
    issued.add(texts[8:], [AckId.parse(t) for t in texts[8:]])  # 12 > 10: 6 stay
    found = issued.find(texts)
    assert found[:6] == [None] * 6
    assert found[6:] == [AckId.parse(t) for t in texts[6:]]


def test_bulk_leases_remember_their_ids_and_a_miss_or_a_bad_id_is_parsed() -> None:
    state = LeaseState(0, Cursor(0, 1, 0, NOW_US), {})
    planner = Planner(state, Policy(tag="feedbeef", ack_deadline_s=10), NOW_US)
    texts = planner.lease_new([5, 6, 9], [None, "k", None])
    assert ackids.ISSUED.find(texts) == [AckId.parse(t) for t in texts]
    assert [AckId.parse(t).key for t in texts] == [
        (table_schemas.KIND_MESSAGE, o) for o in (5, 6, 9)
    ]
    unknown = "feedbeef-m123456789-42"  # never issued here: parsed
    good, parsed, malformed = split_malformed([*texts, unknown, "feedbeef-mX-1"])
    assert good == [*texts, unknown]
    assert parsed == [AckId.parse(t) for t in good]
    assert malformed == {"feedbeef-mX-1": INVALID_ACK_ID}
