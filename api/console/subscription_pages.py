"""Console pages of subscriptions: the list and one subscription."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from starlette.responses import Response

from api.console.access import Viewer
from api.console.charts import Window, duration, human, series_of, when
from api.console.replay import MAX_REPLAY
from api.console.sampler import Sampler, per_second
from api.console.tables import pending_events
from api.console.web import (
    Page,
    backlog_cells,
    live_list,
    matches,
    page,
    resource_page,
    router,
    sampled,
    sub_resource,
)
from lakepubsub._lake import table_schemas
from lakepubsub.delivery.leases import LEASED
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.directory import subscription_of
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SnapshotName, SubscriptionName
from lakepubsub.resources.subscriptions import Subscription

# Leases listed on a subscription's page at most.
SHOWN_LEASES = 20


@router.get("/subscriptions")
async def subscriptions(request: Request, q: str = "") -> Response:
    sampler, window_s = sampled(request)

    def build(v: Viewer) -> Page:
        window = Window(time.time(), window_s)
        topic_names = {e.uid: f"{e.project}/{e.name}" for e in v.view.of_kind(cat.TOPIC)}
        rows = []
        for e in v.view.of_kind(cat.SUBSCRIPTION):
            topic_name = topic_names.get(e.topic_uid or "", "(deleted topic)")
            if not matches(q, f"{e.project}/{e.name}", topic_name):
                continue
            if not v.may("pubsub.subscriptions.get", sub_resource(e.project, e.name)):
                continue
            points = sampler.subscription_points(e.uid)
            rows.append(
                {
                    "project": e.project,
                    "id": e.name,
                    "topic": topic_name,
                    **backlog_cells(points),
                    "spark": window.spark(series_of(points, "backlog"), label="backlog"),
                }
            )
        return live_list("subscriptions.html", "Subscriptions", rows, q, sampler)

    return await page(request, "subscriptions", build)


@resource_page(cat.SUBSCRIPTION)
def subscription(v: Viewer, entry: cat.Entry, sampler: Sampler, window: Window) -> Page:
    sub = subscription_of(entry)
    points = sampler.subscription_points(entry.uid)
    state = sampler.series(entry.uid)
    leases = []
    lease_state = state.state if state is not None else None
    if lease_state is not None:
        leased = sorted(
            (
                r
                for (kind, _), r in lease_state.rows.items()
                if kind == table_schemas.KIND_MESSAGE
                and r.state == LEASED
                and r.deadline_us > window.now * 1e6
            ),
            key=lambda r: r.offset,
        )
        for r in leased[:SHOWN_LEASES]:
            leases.append(
                {
                    "offset": r.offset,
                    "attempt": r.attempt,
                    "deadline": duration(max(0.0, r.deadline_us / 1e6 - window.now)),
                    "ordering_key": r.ordering_key or "",
                }
            )
        more = max(0, len(leased) - SHOWN_LEASES)
    else:
        more = 0
    pending = pending_events(lease_state) if lease_state is not None else []
    truncations = [
        {
            "time": when(t.time_us),
            "reason": t.reason,
            "offsets": f"{t.first_offset:,} to {t.end_offset:,}",
            "dropped": "pending: not pulled and acknowledged yet"
            if t.messages is None
            else f"{t.messages:,} messages, {human(t.bytes or 0, 'B')}",
        }
        for t in [*sampler.truncations(entry.uid), *pending][::-1]
    ]
    charts = [
        window.line(series_of(points, "backlog"), title="Backlog (msgs)"),
        window.line(series_of(points, "backlog_bytes"), title="Backlog (bytes)", unit="B"),
        window.line(series_of(points, "oldest_unacked_s"), title="Oldest unacked age (s)"),
        window.line(per_second(series_of(points, "deliveries")), title="Delivered (msgs/s)"),
    ]
    may_act = v.may("pubsub.subscriptions.consume", sub_resource(entry.project, entry.name))
    return "subscription.html", {
        "title": f"Subscription {entry.project}/{entry.name}",
        "live": True,
        "may_act": may_act,
        "may_snapshot": may_act
        and v.may("pubsub.snapshots.create", Resource.of_project(entry.project)),
        "snapshots": _seekable(v, entry.topic_uid or "") if may_act else [],
        "dead_letter": _dead_letter(v, sampler, sub) if may_act else None,
        "s": {
            "name": sub.name.path,
            "project": entry.project,
            "id": entry.name,
            "settings": _settings(sub),
            **backlog_cells(points),
            "charts": charts,
            "leases": leases,
            "more_leases": more,
            "truncations": truncations,
        },
    }


def _seekable(v: Viewer, topic_uid: str) -> list[str]:
    """Snapshots of the topic the viewer may seek to."""
    return [
        SnapshotName(e.project, e.name).path
        for e in v.view.attached_to(topic_uid)
        if e.kind == cat.SNAPSHOT
        and v.may("pubsub.snapshots.seek", Resource.of_snapshot(SnapshotName(e.project, e.name)))
    ]


def _dead_letter(v: Viewer, sampler: Sampler, sub: Subscription) -> dict[str, Any] | None:
    """Where the subscription dead-letters, and the subscriptions there the viewer may
    replay from (with their backlog as last sampled)."""
    policy = sub.dead_letter_policy
    if policy is None:
        return None
    dlt = policy.dead_letter_topic
    topic = v.view.get(cat.TOPIC, dlt.project, dlt.id)
    sources = []
    for e in v.view.attached_to(topic.uid) if topic is not None else []:
        if e.kind != cat.SUBSCRIPTION or not v.may(
            "pubsub.subscriptions.consume", sub_resource(e.project, e.name)
        ):
            continue
        points = sampler.subscription_points(e.uid)
        backlog = f"{points[-1].backlog:,} unacknowledged" if points else "not sampled yet"
        sources.append({"path": SubscriptionName(e.project, e.name).path, "backlog": backlog})
    return {
        "topic": dlt.path,
        "exists": topic is not None,
        "sources": sources,
        "may_publish": v.may("pubsub.topics.publish", Resource.of_topic(sub.topic)),
        "limit": f"{MAX_REPLAY:,}",
    }


def _settings(sub: Subscription) -> list[tuple[str, str]]:
    dead = sub.dead_letter_policy
    retry = sub.retry_policy
    trunc = sub.truncation_policy
    push = sub.push_config
    truncation = "none"
    if trunc is not None:
        parts = []
        if trunc.max_bytes is not None:
            parts.append(f"maxBytes {trunc.max_bytes:,}")
        if trunc.max_age_s is not None:
            parts.append(f"maxAgeSeconds {trunc.max_age_s:,}")
        truncation = ", ".join(parts)
    return [
        ("Topic", sub.topic.path),
        (
            "Delivery",
            f"push to {push.push_endpoint}" if push.is_push else "pull",
        ),
        ("Filter", sub.filter or "none"),
        ("Ack deadline", f"{sub.ack_deadline_s} s"),
        (
            "Dead letter",
            f"{dead.dead_letter_topic.path} after {dead.max_delivery_attempts} attempts"
            if dead
            else "none",
        ),
        (
            "Retry",
            f"backoff {retry.minimum_backoff_s:g}-{retry.maximum_backoff_s:g} s"
            if retry
            else "immediate redelivery",
        ),
        ("Exactly once", "on" if sub.enable_exactly_once_delivery else "off"),
        ("Message ordering", "on" if sub.enable_message_ordering else "off"),
        ("Truncation policy", truncation),
        ("Message retention", duration(sub.message_retention_s)),
        ("Retain acked messages", "yes" if sub.retain_acked_messages else "no"),
        (
            "Expires after inactivity",
            duration(sub.expiration_ttl_s) if sub.expiration_ttl_s else "never",
        ),
        ("Detached", "yes" if sub.detached else "no"),
        ("Labels", ", ".join(f"{k}={val}" for k, val in sorted(sub.labels.items())) or "none"),
    ]
