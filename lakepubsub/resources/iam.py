"""Pub/Sub's access model: roles, permissions, and IAM policies stored in the catalog.

A principal's permissions on a resource are those of every role granted to
it (or to a member that matches it: ``allUsers``, ``allAuthenticatedUsers``,
``domain:``) by the project's policy, by the resource's own policy, and by
static grants from the server's configuration. Topic and subscription
policies do not inherit from each other, only from the project, as in Pub/Sub.

Policies are catalog entries of kind ``policy`` named by the resource path; a
resource policy records the uid of the resource it was set on, so a topic
deleted and created again under the same name starts with an empty policy.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from lakepubsub import errors
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName, validate_project

POLICY_KIND = "policy"
# Google's etag of a policy that was never set.
EMPTY_ETAG = "ACAB"
# Google's limit on members over all bindings of one policy.
MAX_MEMBERS = 1_500
MEMBER_TYPES = ("user", "serviceAccount", "group", "domain", "apiKey", "principal")

_VIEW = frozenset(
    {
        "pubsub.topics.get",
        "pubsub.topics.list",
        "pubsub.subscriptions.get",
        "pubsub.subscriptions.list",
        "pubsub.snapshots.get",
        "pubsub.snapshots.list",
        "pubsub.schemas.get",
        "pubsub.schemas.list",
        "pubsub.schemas.listRevisions",
    }
)
_PUBLISH = frozenset({"pubsub.topics.publish"})
_SUBSCRIBE = frozenset(
    {"pubsub.subscriptions.consume", "pubsub.topics.attachSubscription", "pubsub.snapshots.seek"}
)
_EDIT = frozenset(
    {
        "pubsub.topics.create",
        "pubsub.topics.update",
        "pubsub.topics.delete",
        "pubsub.topics.detachSubscription",
        "pubsub.subscriptions.create",
        "pubsub.subscriptions.update",
        "pubsub.subscriptions.delete",
        "pubsub.snapshots.create",
        "pubsub.snapshots.update",
        "pubsub.snapshots.delete",
        "pubsub.schemas.create",
        "pubsub.schemas.attach",
        "pubsub.schemas.commit",
        "pubsub.schemas.rollback",
        "pubsub.schemas.delete",
        "pubsub.schemas.validate",
    }
)
_ADMIN = frozenset(
    {
        f"pubsub.{collection}.{verb}"
        for collection in ("topics", "subscriptions", "snapshots", "projects")
        for verb in ("getIamPolicy", "setIamPolicy")
    }
)

VIEWER = "roles/pubsub.viewer"
PUBLISHER = "roles/pubsub.publisher"
SUBSCRIBER = "roles/pubsub.subscriber"
EDITOR = "roles/pubsub.editor"
ADMIN = "roles/pubsub.admin"

ROLES: Mapping[str, frozenset[str]] = {
    VIEWER: _VIEW,
    PUBLISHER: _PUBLISH,
    SUBSCRIBER: _SUBSCRIBE,
    EDITOR: _VIEW | _PUBLISH | _SUBSCRIBE | _EDIT,
    ADMIN: _VIEW | _PUBLISH | _SUBSCRIBE | _EDIT | _ADMIN,
}
# Google's basic roles carry the matching Pub/Sub permissions.
BASIC_ROLES = {"roles/viewer": VIEWER, "roles/editor": EDITOR, "roles/owner": ADMIN}
PERMISSIONS = frozenset().union(*ROLES.values())


def role_name(name: str) -> str:
    """``admin`` or ``roles/pubsub.admin`` (or a basic role) -> the role; else InvalidArgument."""
    full = name if name.startswith("roles/") else f"roles/pubsub.{name}"
    if full not in ROLES and full not in BASIC_ROLES:
        known = ", ".join(sorted([*ROLES, *BASIC_ROLES]))
        raise errors.InvalidArgument(f"unknown role {name!r}; known roles: {known}")
    return full


def permissions_of(roles: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for role in roles:
        out |= ROLES.get(BASIC_ROLES.get(role, role), frozenset())
    return frozenset(out)


# -- resources ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """Something a policy is attached to: a project, topic, subscription or snapshot."""

    kind: str  # "project" or a catalog kind
    project: str
    id: str = ""

    @classmethod
    def of_project(cls, project: str) -> Resource:
        return cls("project", validate_project(project))

    @classmethod
    def of_topic(cls, name: TopicName) -> Resource:
        return cls(cat.TOPIC, name.project, name.id)

    @classmethod
    def of_subscription(cls, name: SubscriptionName) -> Resource:
        return cls(cat.SUBSCRIPTION, name.project, name.id)

    @classmethod
    def of_snapshot(cls, name: SnapshotName) -> Resource:
        return cls(cat.SNAPSHOT, name.project, name.id)

    @property
    def path(self) -> str:
        if self.kind == "project":
            return f"projects/{self.project}"
        return f"projects/{self.project}/{self.kind}s/{self.id}"

    @property
    def collection(self) -> str:
        """The permission prefix: ``pubsub.topics`` for a topic."""
        return f"pubsub.{self.kind}s"


# -- policies ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    role: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    bindings: tuple[Binding, ...] = ()
    etag: str = EMPTY_ETAG
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"version": self.version, "etag": self.etag}
        if self.bindings:
            doc["bindings"] = [{"role": b.role, "members": list(b.members)} for b in self.bindings]
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Policy:
        """A policy from a request body or the catalog; InvalidArgument if malformed."""
        if not isinstance(doc, Mapping):
            raise errors.InvalidArgument("policy must be an object")
        version = doc.get("version", 1) or 1
        if version not in (1, 3) or not isinstance(version, int):
            raise errors.InvalidArgument("policy.version must be 1 or 3")
        raw = doc.get("bindings") or []
        if not isinstance(raw, list):
            raise errors.InvalidArgument("policy.bindings must be a list")
        merged: dict[str, list[str]] = {}
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise errors.InvalidArgument(f"policy.bindings[{i}] must be an object")
            if item.get("condition"):
                raise errors.InvalidArgument("conditional role bindings are not supported")
            role = role_name(str(item.get("role", "")))
            members = item.get("members") or []
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise errors.InvalidArgument(f"policy.bindings[{i}].members must be strings")
            for member in members:
                validate_member(member)
                if member not in merged.setdefault(role, []):
                    merged[role].append(member)
        if sum(len(m) for m in merged.values()) > MAX_MEMBERS:
            raise errors.InvalidArgument(f"a policy may name at most {MAX_MEMBERS} members")
        etag = doc.get("etag") or EMPTY_ETAG
        if not isinstance(etag, str):
            raise errors.InvalidArgument("policy.etag must be a string")
        bindings = tuple(Binding(r, tuple(m)) for r, m in merged.items() if m)
        return cls(bindings, etag, 1)

    def roles_for(self, members: Iterable[str]) -> set[str]:
        wanted = set(members)
        return {b.role for b in self.bindings if wanted.intersection(b.members)}


def validate_member(member: str) -> None:
    if member in ("allUsers", "allAuthenticatedUsers"):
        return
    kind, sep, value = member.partition(":")
    if not sep or not value or kind not in MEMBER_TYPES:
        raise errors.InvalidArgument(
            f"invalid member {member!r}: expected allUsers, allAuthenticatedUsers or "
            f"one of {', '.join(t + ':' for t in MEMBER_TYPES)}"
        )


# -- principals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """Who is calling. ``unrestricted``: no identities are configured, checks are off."""

    member: str = ""  # e.g. "user:alice@example.com"; "" for anonymous
    grants: Mapping[str, frozenset[str]] = field(default_factory=dict)  # project or "*" -> roles
    unrestricted: bool = False

    @property
    def authenticated(self) -> bool:
        return bool(self.member)

    def members(self) -> set[str]:
        """Every policy member that matches this principal."""
        out = {"allUsers"}
        if self.member:
            out |= {self.member, "allAuthenticatedUsers"}
            kind, _, value = self.member.partition(":")
            if kind in ("user", "serviceAccount") and "@" in value:
                out.add("domain:" + value.rsplit("@", 1)[1].lower())
        return out

    def static_roles(self, project: str) -> frozenset[str]:
        return self.grants.get(project, frozenset()) | self.grants.get("*", frozenset())


# -- the store ----------------------------------------------------------------------------


class PolicyStore:
    """Reads and writes policies in the catalog; evaluates permissions."""

    def __init__(self, catalog: cat.Catalog) -> None:
        self._catalog = catalog

    @staticmethod
    def resource_uid(view: cat.View, resource: Resource) -> str | None:
        """The uid of the resource as it exists now ("" for a project); None if it does not."""
        if resource.kind == "project":
            return ""
        entry = view.get(resource.kind, resource.project, resource.id)
        return entry.uid if entry is not None else None

    def policy(self, view: cat.View, resource: Resource) -> Policy:
        """The resource's policy as of ``view``; empty if none was set on this incarnation."""
        entry = view.get(POLICY_KIND, resource.project, resource.path)
        if entry is None or entry.uid != self.resource_uid(view, resource):
            return Policy()
        return Policy.from_json(entry.spec)

    def get(self, resource: Resource) -> Policy:
        view = self._catalog.view()
        if self.resource_uid(view, resource) is None:
            raise errors.NotFound(f"Resource not found: {resource.path}")
        return self.policy(view, resource)

    def put(self, resource: Resource, policy: Policy, *, etag: str | None, now_us: int) -> Policy:
        """Replace the resource's policy. With ``etag``, only if it is still the current one."""

        def change(view: cat.View) -> tuple[cat.Changes, Policy]:
            uid = self.resource_uid(view, resource)
            if uid is None:
                raise errors.NotFound(f"Resource not found: {resource.path}")
            current = self.policy(view, resource)
            if etag and etag != current.etag:
                raise errors.Aborted(
                    "There were concurrent policy changes. Please retry the whole "
                    "read-modify-write with exponential backoff."
                )
            fresh = Policy(policy.bindings, _new_etag(resource, policy), 1)
            old = view.get(POLICY_KIND, resource.project, resource.path)
            entry = cat.Entry(
                POLICY_KIND,
                resource.project,
                resource.path,
                uid,
                None,
                old.created_us if old is not None and old.uid == uid else now_us,
                now_us,
                fresh.to_json(),
            )
            return cat.Changes(put=[entry]), fresh

        return self._catalog.transact(change)

    def permissions(
        self,
        view: cat.View,
        principal: Principal,
        resource: Resource,
        wanted: Iterable[str],
    ) -> set[str]:
        """Which of ``wanted`` the principal holds on the resource as of ``view``."""
        wanted = set(wanted)
        if principal.unrestricted:
            return wanted
        members = principal.members()
        roles = set(principal.static_roles(resource.project))
        roles |= self.policy(view, Resource.of_project(resource.project)).roles_for(members)
        if resource.kind != "project":
            roles |= self.policy(view, resource).roles_for(members)
        return wanted & permissions_of(roles)


def _new_etag(resource: Resource, policy: Policy) -> str:
    # Every write gets a new etag, even if the bindings did not change (as Google's).
    digest = hashlib.sha256(
        orjson.dumps([resource.path, policy.to_json(), os.urandom(8).hex()])
    ).digest()
    return base64.b64encode(digest[:9]).decode()
