"""Blocks of leases (``lakepubsub/delivery/lease_rows.py``) against single rows.

Two lease tables of one lake go through the same random plans: one leases new
messages in blocks (``Planner.lease_new``), the other one row at a time
(``Planner.lease``, which makes the same rows). After every step both hold the
same rows, deferred or committed, and after every commit what this process holds
is what delta-rs reads.
"""

from __future__ import annotations

import random

import pytest
from deltalake import DeltaTable
from support import LakeSpec

from lakepubsub._lake import Lake, table_schemas
from lakepubsub.constants import US_PER_S
from lakepubsub.delivery.ackids import AckId, MessageIds, split_malformed
from lakepubsub.delivery.lease_table import MAX_FILES, LeaseTable
from lakepubsub.delivery.leases import (
    LEASED,
    RELEASE,
    Cursor,
    LeaseRows,
    LeaseState,
    Row,
    initial_rows,
)
from lakepubsub.delivery.planner import BLOCK_FROM, Planner, Policy
from lakepubsub.messages import message_ack_ids

NOW_US = 1_700_000_000_000_000
MESSAGE = table_schemas.KIND_MESSAGE


def new_table(lake: Lake, uid: str) -> LeaseTable:
    lake.create_with(
        lake.leases_uri(uid), initial_rows(0, NOW_US), configuration=table_schemas.LEASES_PROPERTIES
    )
    return LeaseTable(lake, uid)


def stored(lake: Lake, spec: LakeSpec, uid: str) -> LeaseState:
    delta = DeltaTable(lake.leases_uri(uid), storage_options=spec.storage_options or None)
    return LeaseState.from_arrow(delta.to_pyarrow_table(), delta.version())


def test_a_block_reads_as_the_rows_it_holds() -> None:
    state = LeaseState(0, Cursor(0, 1, 0, NOW_US))
    planner = Planner(state, Policy(tag="aaaaaaaa", ack_deadline_s=10), NOW_US)
    offsets = [5, 6, 9, *range(12, 12 + BLOCK_FROM)]  # a filter skipped 7, 8, 10 and 11
    ids = message_ack_ids("aaaaaaaa", offsets, planner.lease_new(offsets, [None] * len(offsets)))
    assert ids[:3] == ["aaaaaaaa-m5-1", "aaaaaaaa-m6-2", "aaaaaaaa-m9-3"]
    assert not planner.changed and len(planner.new_blocks) == 1
    rows = planner.result_state(1).rows
    assert isinstance(rows, LeaseRows) and len(rows) == len(offsets)
    deadline = NOW_US + 10 * US_PER_S
    assert rows[(MESSAGE, 9)] == Row(MESSAGE, 9, 3, 1, LEASED, deadline)
    assert (MESSAGE, 7) not in rows and rows.get((MESSAGE, 7)) is None
    assert dict(rows) == {(MESSAGE, o): planner.row((MESSAGE, o)) for o in offsets}
    with pytest.raises(KeyError):
        rows[(MESSAGE, 8)]
    # a deadline change takes its row out of the block: a single row from then on
    later = Planner(LeaseState(1, planner.cursor, rows), planner.policy, NOW_US)
    later.modify_deadline([AckId.parse(ids[1])], 30)
    changed = later.result_state(2).rows
    assert changed[(MESSAGE, 6)].deadline_us == NOW_US + 30 * US_PER_S
    assert (MESSAGE, 6) in changed.single and changed.block_count() == len(offsets) - 1
    # an ack in bulk takes offsets out of the block; the state planned on is unchanged
    acked = Planner(LeaseState(2, later.cursor, changed), planner.policy, NOW_US)
    _, parsed, _ = split_malformed(ids)
    assert isinstance(parsed, MessageIds)
    acked.acknowledge(parsed)
    assert acked.removed == set(offsets) - {6} and acked.changed == {(MESSAGE, 6): None}
    assert len(acked.result_state(3).rows) == 0 and len(changed) == len(offsets)
    assert acked.outstanding() == 0 and later.outstanding() == len(offsets)


def test_a_few_new_leases_are_single_rows() -> None:
    planner = Planner(LeaseState(0, Cursor(0, 1, 0, NOW_US)), Policy("aaaaaaaa", 10), NOW_US)
    planner.lease_new(list(range(BLOCK_FROM - 1)), [None] * (BLOCK_FROM - 1))
    assert not planner.new_blocks and len(planner.changed) == BLOCK_FROM - 1
    planner.lease_new(list(range(100, 100 + BLOCK_FROM)), [None] * BLOCK_FROM)
    assert len(planner.new_blocks) == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_blocks_and_single_rows_go_through_random_plans_alike(lake: LakeSpec, seed: int) -> None:
    lake_ = Lake(lake.settings())
    blocks, singles = new_table(lake_, "aaaaaaaa"), new_table(lake_, "bbbbbbbb")
    rng = random.Random(seed)
    # Ack ids out, by table: the offset and delivery id of each (the tags differ).
    out: list[tuple[int, int]] = []
    acked: list[tuple[int, int]] = []
    now = NOW_US
    for step in range(60):
        now += rng.choice([0, 1, 3]) * US_PER_S
        plans = []
        for table, tag in ((blocks, "aaaaaaaa"), (singles, "bbbbbbbb")):
            planner = Planner(table.state(look=False), Policy(tag=tag, ack_deadline_s=5), now)
            plans.append((table, tag, planner))
        # One to three requests in one plan, as a dispatcher's cycle takes them.
        for _ in range(rng.randint(1, 3)):
            out = one_request(rng, plans, blocks, out, acked)
        commit = rng.random() < 0.4 or step == 59
        for table, _, planner in plans:
            counted = planner.outstanding()
            if commit:
                table.commit(planner)
            elif planner.dirty:
                table.defer(planner)
            assert len(table._log.files) <= MAX_FILES
            assert table.state(look=False).outstanding() == counted
        ours, theirs = blocks.state(look=False), singles.state(look=False)
        assert dict(ours.rows) == dict(theirs.rows), step
        assert ours.cursor.frontier == theirs.cursor.frontier
        assert ours.outstanding() == theirs.outstanding() == len(theirs.rows)
        assert ours.floor() == theirs.floor()
        assert ours.earliest_due_us(now) == theirs.earliest_due_us(now)
        if commit:
            for table, uid in ((blocks, "aaaaaaaa"), (singles, "bbbbbbbb")):
                on_disk = stored(lake_, lake, uid)
                assert dict(on_disk.rows) == dict(table.state(look=False).rows), step
                assert on_disk.cursor == table.state(look=False).cursor
    # a process that reads the table afresh holds the same rows
    assert dict(LeaseTable(lake_, "aaaaaaaa").state().rows) == dict(blocks.state().rows)


def one_request(
    rng: random.Random,
    plans: list[tuple[LeaseTable, str, Planner]],
    blocks: LeaseTable,
    out: list[tuple[int, int]],
    done_before: list[tuple[int, int]],
) -> list[tuple[int, int]]:
    """One random request planned alike on both tables; the ack ids out after it
    (``done_before``: the ones acknowledged so far)."""
    op = rng.random()
    if op < 0.35 or not out:  # lease new messages, some filtered out
        start, first = plans[0][2].cursor.frontier, plans[0][2].cursor.next_delivery
        offsets = [o for o in range(start, start + rng.randint(1, 300)) if rng.random() < 0.8]
        for table, _, planner in plans:
            if table is blocks:
                planner.lease_new(offsets, [None] * len(offsets))
            else:
                for o in offsets:
                    planner.lease(Row(MESSAGE, o))
            planner.advance((offsets[-1] + 1) if offsets else start)
        out += [(o, first + i) for i, o in enumerate(offsets)]
    elif op < 0.6:  # ack some, in bulk (all message ids) or one by one
        rng.shuffle(out)
        done = out[: rng.randint(1, 120)]
        out = out[len(done) :]
        done_before.extend(done)
        for _, tag, planner in plans:
            texts = [f"{tag}-m{o}-{d}" for o, d in done]
            _, parsed, _ = split_malformed(texts)
            planner.acknowledge(parsed if rng.random() < 0.5 else list(parsed))
    elif op < 0.8:  # extend, nack or give back some; some were acknowledged already
        pool = out + done_before[-50:]
        chosen = rng.sample(pool, min(len(pool), rng.randint(1, 40)))
        deadline = rng.choice([0, 1, 5, 30, RELEASE])
        for _, tag, planner in plans:
            ids = [AckId(tag, MESSAGE, o, d) for o, d in chosen]
            if deadline == RELEASE:
                planner.release(ids)
            else:
                planner.modify_deadline(ids, deadline)
    else:  # redeliver what is due
        for _, _, planner in plans:
            for row in planner.available()[:50]:
                claim = planner.lease(row)
                if planner is plans[0][2]:
                    out.append((row.offset, claim.row.delivery_id))
    return out
