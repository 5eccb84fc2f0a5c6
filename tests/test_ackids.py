"""Ack ids: new leases' ids as text, parsed back in bulk; a malformed one fails alone."""

from __future__ import annotations

import random

import pyarrow as pa

from lakepubsub._lake import table_schemas
from lakepubsub.delivery.ackids import INVALID_ACK_ID, AckId, MessageIds, split_malformed
from lakepubsub.delivery.leases import LEASED, Cursor, LeaseState, Row
from lakepubsub.delivery.planner import Planner, Policy
from lakepubsub.errors import InvalidArgument
from lakepubsub.messages import Run, message_ack_ids

NOW_US = 1_700_000_000_000_000


def test_bulk_leases_ids_parse_back_and_a_malformed_id_fails_alone() -> None:
    state = LeaseState(0, Cursor(0, 1, 0, NOW_US), {})
    planner = Planner(state, Policy(tag="feedbeef", ack_deadline_s=10), NOW_US)
    deliveries = planner.lease_new([5, 6, 9], [None, "k", None])
    assert deliveries == range(1, 4)
    texts = message_ack_ids("feedbeef", [5, 6, 9], deliveries)
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


def test_message_ids_of_one_subscription_parse_in_bulk() -> None:
    message, event = table_schemas.KIND_MESSAGE, table_schemas.KIND_EVENT
    texts = [f"feedbeef-m{o}-{o * 2 + 1}" for o in (7, 3, 12345678901234, 0)]
    _, parsed, _ = split_malformed(texts)
    assert isinstance(parsed, MessageIds)
    assert parsed.offsets == [7, 3, 12345678901234, 0]
    assert parsed == [AckId.parse(t) for t in texts]
    assert parsed[1] == AckId("feedbeef", message, 3, 7)
    assert parsed[1:3] == [AckId.parse(t) for t in texts[1:3]]
    # another tag, an event, or a malformed id: each id parsed on its own
    for other in ("0badcafe-m1-2", "feedbeef-e1-2", "feedbeef-m1-"):
        good, each, malformed = split_malformed([*texts, other])
        assert not isinstance(each, MessageIds)
        if malformed:
            assert good == texts and each == parsed
        else:
            assert each == [*parsed, AckId.parse(other)]
    assert AckId.parse("0badcafe-e4-9") == AckId("0badcafe", event, 4, 9)


def test_bulk_acks_settle_exactly_what_one_by_one_would() -> None:
    rng = random.Random(4)
    message = table_schemas.KIND_MESSAGE
    for _ in range(50):
        rows = {
            (message, o): Row(message, o, o + 100, 1, LEASED, NOW_US + 10**7)
            for o in rng.sample(range(60), 30)
        }
        state = LeaseState(0, Cursor(60, 200, 0, NOW_US), rows)
        planners = [Planner(state, Policy(tag="feedbeef", ack_deadline_s=10), NOW_US)
                    for _ in range(2)]  # fmt: skip
        for planner in planners:  # the same plan so far: new leases, a drop, an ack
            planner.lease_new([60, 61, 62], [None] * 3)
            planner.drop((message, sorted(rows)[0][1]))
            planner.changed[(message, 63)] = None
        offsets = rng.sample(range(70), 25)
        texts = [f"feedbeef-m{o}-{o + 100}" for o in offsets]
        _, bulk, _ = split_malformed(texts)
        assert isinstance(bulk, MessageIds)
        planners[0].acknowledge(bulk)
        planners[1].acknowledge([AckId.parse(t) for t in texts])
        # the bulk path takes block rows out by offset (``removed``), not by key
        assert planners[0].result_state(1).rows == planners[1].result_state(1).rows
        assert planners[0].outstanding() == planners[1].outstanding()
        planners[0].acknowledge(split_malformed(["0badcafe-m1-101"])[1])  # not its tag
        assert planners[0].result_state(1).rows == planners[1].result_state(1).rows


def test_bulk_parsing_agrees_with_parsing_each_id_on_odd_and_malformed_ids() -> None:
    rng = random.Random(11)
    odd = [
        "feedbeef-m007-0009",  # leading zeros
        f"feedbeef-m{10**18 - 1}-{10**18}",  # past int64's every-digit range
        f"feedbeef-m{2**63 - 1}-1",
        f"feedbeef-m{2**63}-1",  # past int64
        f"feedbeef-m1-{'9' * 20}",
        "feedbeef-m-1",
        "feedbeef-m1-",
        "feedbeef-m1--2",
        "feedbeef-m 1-2",
        "feedbeef-m1-2 ",
        "feedbeef-m1-٣",  # a digit, but not ASCII
        "feedbeef-e1-2",
        "FEEDBEEF-m1-2",
        "feedbeef-m1-2-3",
    ]
    for _ in range(200):
        texts = [f"feedbeef-m{rng.randrange(10**rng.randint(1, 12))}-{rng.randrange(10**9)}"
                 for _ in range(rng.randint(1, 30))]  # fmt: skip
        texts.insert(rng.randrange(len(texts) + 1), rng.choice(odd))
        good, parsed, malformed = split_malformed(texts)
        each = {}
        for t in texts:
            try:
                each[t] = AckId.parse(t)
            except Exception:
                each[t] = None
        assert good == [t for t in texts if each[t] is not None]
        assert list(parsed) == [each[t] for t in good]
        assert set(malformed) == {t for t in texts if each[t] is None}


def test_a_runs_ack_ids_made_in_bulk_are_its_ids_as_text() -> None:
    """``Run.ack_id_column`` writes digits into a byte matrix; it must give the text
    ``message_ack_ids`` gives, for any widths, across powers of ten as well."""
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(1, 60)
        low = rng.choice([0, 1, 9_990, max(0, 10 ** rng.randint(1, 17) - rng.randint(0, 30))])
        offsets = sorted(rng.sample(range(low, low + 3 * n), n))
        first = rng.choice([1, 99_995, max(1, 10 ** rng.randint(1, 17) - rng.randint(0, 30))])
        table = pa.table({"offset": pa.array(offsets, pa.int64())})
        run = Run(table.slice(0), None, range(first, first + n), "0a1b2c3d")
        expected = message_ack_ids("0a1b2c3d", offsets, range(first, first + n))
        assert run.ack_id_column().to_pylist() == expected
        assert run.ack_ids == expected
        cut = Run(table, None, range(first, first + n), "0a1b2c3d").slice(n // 3, n)
        assert cut.ack_id_column().to_pylist() == expected[n // 3 :]


def parse_or_none(text: str) -> AckId | None:
    try:
        return AckId.parse(text)
    except InvalidArgument:
        return None


def by_one(texts: list[str]) -> tuple[list[str], list[AckId], dict[str, str]]:
    """What ``split_malformed`` answers, one id at a time."""
    each = [(text, parse_or_none(text)) for text in texts]
    return (
        [text for text, ack in each if ack is not None],
        [ack for _, ack in each if ack is not None],
        {text: INVALID_ACK_ID for text, ack in each if ack is None},
    )


def test_ids_of_one_length_read_as_a_matrix_parse_as_one_by_one() -> None:
    rng = random.Random(11)
    tag = "feedbeef"
    # one length, two numbers of as many digits each: read as a matrix of bytes
    alike = [f"{tag}-m{o}-{d}" for o, d in zip(range(500, 900), range(7000, 7400), strict=True)]
    good, parsed, malformed = split_malformed(alike)
    assert isinstance(parsed, MessageIds) and parsed.deliveries is not None
    assert (good, list(parsed), malformed) == by_one(alike)
    assert parsed.offsets == list(range(500, 900)) and parsed.delivery_ids[-1] == 7399
    # 18 digits each still fit; leading zeros read as protobuf's text would
    wide = [f"{tag}-m{'9' * 18}-{'1' * 18}", f"{tag}-m{'0' * 17}7-{'2' * 18}"]
    assert list(split_malformed(wide).parsed) == by_one(wide)[1]
    # Then one byte changed, or the dash moved, or 19 digits, or another tag or kind:
    # each parses, or fails alone, as it would one at a time.
    changes = [*"0123456789-m\nxé", ""]
    for _ in range(300):
        texts = list(rng.sample(alike, 20))
        i = rng.randrange(len(texts))
        text = texts[i]
        match rng.randrange(5):
            case 0:
                at = rng.randrange(len(text))
                text = text[:at] + rng.choice(changes) + text[at + 1 :]
            case 1:
                head, _, tail = text.rpartition("-")
                text = f"{head[:-1]}-{head[-1]}{tail}"  # same length, dash one left
            case 2:
                text = f"{tag}-m{'1' * 19}-{'2' * 19}"
            case 3:
                text = (
                    text.replace(tag, "0badcafe")
                    if rng.random() < 0.5
                    else text.replace("-m", "-e")
                )
            case _:
                text = text.replace("-", "-0", 1) if rng.random() < 0.5 else text[:-1]
        texts[i] = text
        good, parsed, malformed = split_malformed(texts)
        assert (good, list(parsed), malformed) == by_one(texts), texts
