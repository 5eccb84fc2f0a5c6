"""Ack ids: new leases' ids as text, parsed back in bulk; a malformed one fails alone."""

from __future__ import annotations

from lakepubsub._lake import table_schemas
from lakepubsub.delivery.ackids import INVALID_ACK_ID, AckId, split_malformed
from lakepubsub.delivery.leases import Cursor, LeaseState
from lakepubsub.delivery.planner import Planner, Policy

NOW_US = 1_700_000_000_000_000


def test_bulk_leases_ids_parse_back_and_a_malformed_id_fails_alone() -> None:
    state = LeaseState(0, Cursor(0, 1, 0, NOW_US), {})
    planner = Planner(state, Policy(tag="feedbeef", ack_deadline_s=10), NOW_US)
    texts = planner.lease_new([5, 6, 9], [None, "k", None])
    message = table_schemas.KIND_MESSAGE
    assert [AckId.parse(t) for t in texts] == [
        AckId("feedbeef", message, 5, 1),
        AckId("feedbeef", message, 6, 2),
        AckId("feedbeef", message, 9, 3),
    ]
    assert planner.changed[(message, 6)].ordering_key == "k"
    good, parsed, malformed = split_malformed([*texts, "feedbeef-mX-1"])
    assert good == texts
    assert parsed == [AckId.parse(t) for t in texts]
    assert malformed == {"feedbeef-mX-1": INVALID_ACK_ID}
