"""Lease-table commits: copy-on-write by file, readable by delta-rs, strict on the version."""

from __future__ import annotations

import random

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from support import LakeSpec

from lakepubsub._lake import Lake, table_schemas
from lakepubsub.constants import ACTIVITY_RESOLUTION_S, US_PER_S
from lakepubsub.delivery.ackids import AckId
from lakepubsub.delivery.lease_table import CURSOR_WITH_ROWS_MAX, MAX_FILES, LeaseTable
from lakepubsub.delivery.leases import HELD, Cursor, LeaseState, Row, initial_rows
from lakepubsub.delivery.planner import Planner, Policy
from lakepubsub.messages import message_ack_ids

POLICY = Policy(tag="t", ack_deadline_s=10)
NOW_US = 1_700_000_000_000_000


def new_table(spec: LakeSpec) -> tuple[Lake, LeaseTable]:
    lake = Lake(spec.settings())
    lake.create_with(
        lake.leases_uri("sub"),
        initial_rows(0, NOW_US),
        configuration=table_schemas.LEASES_PROPERTIES,
    )
    return lake, LeaseTable(lake, "sub")


def lease_new(table: LeaseTable, n: int) -> list[AckId]:
    planner = Planner(table.state(), POLICY, NOW_US)
    start = planner.cursor.frontier
    claims = [planner.lease(Row(table_schemas.KIND_MESSAGE, o)) for o in range(start, start + n)]
    planner.advance(start + n)
    table.commit(planner)
    return [c.ack_id for c in claims]


def ack(table: LeaseTable, ack_ids: list[AckId], now_us: int = NOW_US) -> None:
    planner = Planner(table.state(), POLICY, now_us)
    planner.acknowledge(ack_ids)
    table.commit(planner)


def delta_table(lake: Lake, spec: LakeSpec) -> DeltaTable:
    return DeltaTable(lake.leases_uri("sub"), storage_options=spec.storage_options or None)


def stored(lake: Lake, spec: LakeSpec) -> LeaseState:
    delta = delta_table(lake, spec)
    return LeaseState.from_arrow(delta.to_pyarrow_table(), delta.version())


def matches_stored(table: LeaseTable, lake: Lake, spec: LakeSpec) -> LeaseState:
    """What delta-rs reads of the table, asserted equal to this process's state."""
    ours, theirs = table.state(), stored(lake, spec)
    assert ours.version == theirs.version
    assert ours.cursor == theirs.cursor
    assert ours.rows == theirs.rows
    return theirs


def test_pull_then_ack_rewrites_only_what_changed(lake: LakeSpec) -> None:
    lake_, table = new_table(lake)
    ids = lease_new(table, 1000)
    # the cursor in a file of its own, the 1,000 new leases in another
    assert sorted(f.rows for f in table._log.files.values()) == [1, 1000]
    cursor_file = next(p for p, f in table._log.files.items() if f.rows == 1)
    ack(table, ids)
    # the ack deleted every row of the leases' file and left the cursor as it was:
    # the commit removes the file and writes none
    assert list(table._log.files) == [cursor_file]
    state = stored(lake_, lake)
    assert state.rows == {}
    assert state.cursor.frontier == 1000
    assert state.cursor.next_delivery == 1001


def test_the_cursor_is_rewritten_only_when_it_changes(lake: LakeSpec) -> None:
    lake_, table = new_table(lake)
    n = CURSOR_WITH_ROWS_MAX + 10  # too many leases to share the cursor's file
    ids = lease_new(table, n)
    cursor_file = next(p for p, f in table._log.files.items() if f.rows == 1)
    # a partial ack a minute later: the other leases are rewritten, the cursor is not
    # (its activity time is kept to ACTIVITY_RESOLUTION_S)
    ack(table, ids[:4], NOW_US + 60 * US_PER_S)
    assert cursor_file in table._log.files
    assert sorted(f.rows for f in table._log.files.values()) == [1, n - 4]
    assert table.state().cursor.active_us == NOW_US
    # hours later the activity time is stale: this ack rewrites the cursor too
    later_us = NOW_US + (ACTIVITY_RESOLUTION_S + 1) * US_PER_S
    ack(table, ids[4:6], later_us)
    assert cursor_file not in table._log.files
    assert table.state().cursor.active_us == later_us
    # what this process holds is what any reader of the table sees
    assert len(matches_stored(table, lake_, lake).rows) == n - 6


def test_a_changed_cursor_shares_a_small_rows_file(lake: LakeSpec) -> None:
    lake_, table = new_table(lake)
    ids = lease_new(table, 10)
    # the new leases and the advanced cursor: one file, one add
    (only,) = table._log.files
    assert table._log.files[only].rows == 11
    # an ack that advances the cursor rewrites that file with the leases it keeps
    ack(table, ids[:4], NOW_US + (ACTIVITY_RESOLUTION_S + 1) * US_PER_S)
    (rewritten,) = table._log.files
    assert rewritten != only and table._log.files[rewritten].rows == 7
    assert len(matches_stored(table, lake_, lake).rows) == 6
    # a process that opens the table later finds the cursor in that file and
    # commits on it as this one does
    other = LeaseTable(lake_, "sub")
    ack(other, ids[4:], NOW_US + 2 * (ACTIVITY_RESOLUTION_S + 1) * US_PER_S)
    assert [f.rows for f in other._log.files.values()] == [1]
    state = stored(lake_, lake)
    assert state.rows == {} and state.cursor.frontier == 10


def test_a_plan_that_changes_nothing_stored_still_commits_one_cursor(lake: LakeSpec) -> None:
    lake_, table = new_table(lake)
    lease_new(table, 3)
    planner = Planner(table.state(), POLICY, NOW_US)
    planner.hold(7, "k")  # a row made and dropped within the plan
    planner.drop((table_schemas.KIND_MESSAGE, 7))
    assert planner.dirty and not planner.cursor_changed
    version = table.version
    table.commit(planner)
    assert table.version == version + 1
    rows = delta_table(lake_, lake).to_pyarrow_table()
    assert rows["kind"].to_pylist().count(table_schemas.KIND_CURSOR) == 1
    assert len(matches_stored(table, lake_, lake).rows) == 3


def test_state_matches_what_delta_rs_reads_after_random_plans(lake: LakeSpec) -> None:
    lake_, table = new_table(lake)
    rng = random.Random(3)
    outstanding: list[AckId] = []
    for _ in range(40):
        if outstanding and rng.random() < 0.5:
            rng.shuffle(outstanding)
            done, outstanding = outstanding[: rng.randint(1, 30)], outstanding[30:]
            ack(table, done)
        else:
            outstanding += lease_new(table, rng.randint(1, 50))
        assert len(table._log.files) <= MAX_FILES
    matches_stored(table, lake_, lake)
    ours = table.state()
    fresh = LeaseTable(lake_, "sub").state()
    assert fresh.rows == ours.rows and fresh.cursor == ours.cursor


def test_a_plan_on_a_stale_state_fails_and_changes_nothing(lake: LakeSpec) -> None:
    lake_, first = new_table(lake)
    second = LeaseTable(lake_, "sub")
    stale = Planner(second.state(), POLICY, NOW_US)
    stale.lease(Row(table_schemas.KIND_MESSAGE, 0))
    lease_new(first, 5)
    with pytest.raises(CommitFailedError):
        second.commit(stale)
    state = stored(lake_, lake)
    assert sorted(k[1] for k in state.rows) == [0, 1, 2, 3, 4]
    assert second.state().rows == state.rows  # the loser rereads and sees the winner


def test_two_writers_alternating_see_each_others_commits(lake: LakeSpec) -> None:
    """Two handles on one lease table commit in turn: each sees the other's commits exactly."""
    lake_, first = new_table(lake)
    second = LeaseTable(lake_, "sub")
    rng = random.Random(7)
    outstanding: list[AckId] = []
    for step in range(60):
        table = (first, second)[rng.random() < 0.5]
        if outstanding and rng.random() < 0.5:
            rng.shuffle(outstanding)
            cut = rng.randint(1, len(outstanding))
            done, outstanding = outstanding[:cut], outstanding[cut:]
            ack(table, done)
        else:
            outstanding += lease_new(table, rng.randint(1, 40))
        theirs = stored(lake_, lake)
        for handle in (first, second):
            ours = handle.state()
            assert (ours.version, ours.cursor, ours.rows) == (
                theirs.version,
                theirs.cursor,
                theirs.rows,
            ), f"step {step}"
    assert sorted(k[1] for k in theirs.rows) == sorted(a.offset for a in outstanding)


def test_bulk_lease_of_new_messages_equals_leasing_each(lake: LakeSpec) -> None:
    """``Planner.lease_new`` (the dispatcher's path for messages past the frontier)
    makes the same rows, ack ids and cursor as ``lease`` of a new row for each."""
    _, table = new_table(lake)
    lease_new(table, 3)  # delivery ids no longer start at 1
    state = table.state()
    policy = Policy(tag="t", ack_deadline_s=10, lease_slack_us=2_000_000)
    one, bulk = Planner(state, policy, NOW_US), Planner(state, policy, NOW_US)
    offsets, keys = [3, 4, 7], [None, "k", None]
    each = [
        one.lease(Row(table_schemas.KIND_MESSAGE, o, ordering_key=k))
        for o, k in zip(offsets, keys, strict=True)
    ]
    deliveries = bulk.lease_new(offsets, keys)
    assert message_ack_ids("t", offsets, deliveries) == [str(c.ack_id) for c in each]
    assert bulk.changed == one.changed
    assert bulk.cursor == one.cursor
    assert [str(c.ack_id) for c in each] == ["t-m3-4", "t-m4-5", "t-m7-6"]


def test_the_earliest_due_time_carried_across_plans_is_exact_once_reached() -> None:
    """A state made by a plan inherits its parent's bound on when a row comes due
    (no pass over every row per cycle): it never lies past the true earliest time,
    and asked with the time now it answers as the exact time would."""
    rng = random.Random(5)
    state = LeaseState(0, Cursor(0, 1, 0, NOW_US), {})
    now_us = NOW_US
    outstanding: list[AckId] = []
    for step in range(300):
        now_us += rng.randint(0, 4) * US_PER_S
        policy = Policy(tag="t", ack_deadline_s=rng.randint(10, 20))
        planner = Planner(state, policy, now_us)
        action = rng.random()
        if outstanding and action < 0.4:
            rng.shuffle(outstanding)
            done, outstanding = outstanding[:3], outstanding[3:]
            planner.acknowledge(done)
        elif outstanding and action < 0.55:
            planner.modify_deadline(outstanding[:2], rng.choice([0, 30, 60]))
        else:
            due = [c.ack_id for c in (planner.lease(r) for r in planner.available())]
            start = planner.cursor.frontier
            new = [planner.lease(Row(table_schemas.KIND_MESSAGE, o)) for o in (start, start + 1)]
            planner.advance(start + 2)
            outstanding += due + [c.ack_id for c in new]
        state = planner.result_state(step + 1)
        exact = min(
            (r.deadline_us for r in state.rows.values() if r.state != HELD), default=2**63 - 1
        )
        assert state.earliest_due_us() <= exact
        probe = now_us + rng.randint(-5, 40) * US_PER_S
        assert (state.earliest_due_us(probe) > probe) == (exact > probe)
