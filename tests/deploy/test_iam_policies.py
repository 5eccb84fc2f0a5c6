"""Every IAM policy document grants S3 only under the lake prefix, and nothing broadly.

Identity policies (no `principals`) are checked statement by statement; resource
and trust policies (with `principals`) are checked for what they must contain.
The lake grant is also rendered with real values and matched the way IAM does.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from deploytools import (
    TERRAFORM,
    PolicyDocument,
    labelled_blocks,
    parse_tf,
    policy_documents,
    unquote,
)

LAKE_BUCKET = "var.lake_bucket_arn"
LAKE_OBJECTS = "${var.lake_bucket_arn}/${var.lake_prefix}/*"
LAKE_LIST_PREFIX = "${var.lake_prefix}/*"
# Actions that AWS defines without resource-level permissions.
RESOURCELESS_ACTIONS = {"ecr:GetAuthorizationToken"}
# Read-only metadata that only resolves against log-group ARNs of the account.
ACCOUNT_LOG_GROUPS_ACTIONS = {"logs:DescribeLogGroups"}
ACCOUNT_SCOPE = (
    "${data.aws_partition.current.partition}",
    "${data.aws_region.current.name}",
    "${data.aws_caller_identity.current.account_id}",
    "${local.partition}",
    "${local.region}",
    "${local.account_id}",
)


def _actions(statement: dict[str, Any]) -> list[str]:
    return [unquote(a) for a in statement.get("actions", [])]


def _resources(statement: dict[str, Any]) -> list[str]:
    return [unquote(r) for r in statement.get("resources", [])]


def _conditions(statement: dict[str, Any]) -> dict[str, list[str]]:
    return {
        unquote(c["variable"]): [unquote(v) for v in c["values"]]
        for c in statement.get("condition", [])
    }


def _statement_id(item: tuple[PolicyDocument, int, dict[str, Any]]) -> str:
    doc, i, st = item
    return f"{doc.id}[{unquote(st.get('sid', i))}]"


DOCS = policy_documents()
IDENTITY_STATEMENTS = [
    (doc, i, st)
    for doc in DOCS
    for i, st in enumerate(doc.statements)
    if "principals" not in st and unquote(st.get("effect", '"Allow"')) == "Allow"
]
TRUST_DOCS = [doc for doc in DOCS if any("sts:AssumeRole" in _actions(st) for st in doc.statements)]


def test_there_are_policies_to_check() -> None:
    assert len(DOCS) >= 10
    assert len(IDENTITY_STATEMENTS) >= 15


@pytest.mark.parametrize("item", IDENTITY_STATEMENTS, ids=_statement_id)
def test_no_wildcard_actions(item: tuple[PolicyDocument, int, dict[str, Any]]) -> None:
    for action in _actions(item[2]):
        assert action != "*" and not action.endswith(":*"), action


@pytest.mark.parametrize("item", IDENTITY_STATEMENTS, ids=_statement_id)
def test_s3_grants_stop_at_the_lake_prefix(
    item: tuple[PolicyDocument, int, dict[str, Any]],
) -> None:
    statement = item[2]
    s3_actions = [a for a in _actions(statement) if a.startswith("s3:")]
    if not s3_actions:
        return
    resources = _resources(statement)
    if s3_actions == ["s3:ListBucket"]:
        assert resources == [LAKE_BUCKET]
        prefixes = _conditions(statement).get("s3:prefix")
        assert prefixes, "listing the bucket must be limited by s3:prefix"
        assert all(p.startswith("${var.lake_prefix}/") for p in prefixes), prefixes
    else:
        assert "s3:ListBucket" not in s3_actions, "keep ListBucket in its own statement"
        assert resources == [LAKE_OBJECTS], resources


def _anchor(resource: str) -> str:
    """What is left of a resource once partition, region and account are removed."""
    for scope in ACCOUNT_SCOPE:
        resource = resource.replace(scope, "")
    return resource


@pytest.mark.parametrize("item", IDENTITY_STATEMENTS, ids=_statement_id)
def test_every_resource_is_a_named_thing(item: tuple[PolicyDocument, int, dict[str, Any]]) -> None:
    statement = item[2]
    actions = set(_actions(statement))
    for resource in _resources(statement):
        if resource == "*":
            assert actions <= RESOURCELESS_ACTIONS, f"{sorted(actions)} on *"
        elif resource.endswith(":log-group:*"):
            assert actions <= ACCOUNT_LOG_GROUPS_ACTIONS, f"{sorted(actions)} on {resource}"
        elif resource.endswith(":task/*"):
            # Tagging tasks at launch; the condition limits it to RunTask.
            assert actions == {"ecs:TagResource"}
            assert _conditions(statement).get("ecs:CreateAction") == ["RunTask"]
        else:
            anchor = _anchor(resource)
            assert any(ref in anchor for ref in ("var.", "local.", "aws_")), (
                f"{resource} does not name a resource of this deployment"
            )


@pytest.mark.parametrize("item", IDENTITY_STATEMENTS, ids=_statement_id)
def test_key_use_goes_through_one_service(item: tuple[PolicyDocument, int, dict[str, Any]]) -> None:
    statement = item[2]
    if not any(a.startswith("kms:") for a in _actions(statement)):
        return
    conditions = _conditions(statement)
    assert "kms:ViaService" in conditions or any(
        c.startswith("kms:EncryptionContext:") for c in conditions
    ), "KMS use must be tied to a service or an encryption context"


@pytest.mark.parametrize("item", IDENTITY_STATEMENTS, ids=_statement_id)
def test_roles_are_passed_to_one_service_only(
    item: tuple[PolicyDocument, int, dict[str, Any]],
) -> None:
    statement = item[2]
    if "iam:PassRole" in _actions(statement):
        assert "iam:PassedToService" in _conditions(statement)
        assert "*" not in _resources(statement)


@pytest.mark.parametrize("doc", TRUST_DOCS, ids=lambda d: d.id)
def test_trust_policies_are_confined_to_this_account(doc: PolicyDocument) -> None:
    for statement in doc.statements:
        (principals,) = statement["principals"]
        assert unquote(principals["type"]) == "Service"
        assert "aws:SourceAccount" in _conditions(statement)


def test_push_has_no_role_of_its_own() -> None:
    roles = [
        (path, name)
        for path in sorted((TERRAFORM / "modules").rglob("*.tf"))
        for type_, name, _ in labelled_blocks(parse_tf(path), "resource")
        if type_ == "aws_iam_role"
    ]
    assert roles
    assert not [r for r in roles if "push" in r[1]], roles


def test_api_task_role_holds_only_the_lake_and_metrics_grants() -> None:
    docs = {doc.name: doc for doc in DOCS if doc.path.parent.name == "iam"}
    api_task = docs["api_task"]
    # The rest comes in through source_policy_documents = [lake_read_write].
    assert [unquote(s["sid"]) for s in api_task.statements] == ["WriteEmbeddedMetricRecords"]
    assert _resources(api_task.statements[0]) == ["${var.metrics_log_group_arn}:*"]
    lake = docs["lake_read_write"]
    assert {a for s in lake.statements for a in _actions(s)} == {
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
        "kms:Decrypt",
        "kms:GenerateDataKey",
    }


def test_lake_bucket_policy_refuses_plain_http() -> None:
    (doc,) = [d for d in DOCS if d.name == "tls_only"]
    deny = [s for s in doc.statements if unquote(s.get("effect")) == "Deny"]
    assert any(_conditions(s).get("aws:SecureTransport") == ["false"] for s in deny)


def _render(template: str, bucket: str, prefix: str) -> str:
    return template.replace("${var.lake_bucket_arn}", f"arn:aws:s3:::{bucket}").replace(
        "${var.lake_prefix}", prefix
    )


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("lake/topics/orders/_delta_log/00000000000000000000.json", True),
        ("lake/subscriptions/s1/part-0001.parquet", True),
        ("lake-backup/topics/orders/part-0001.parquet", False),
        ("lakehouse/other-team/data.parquet", False),
        ("other/lake/x", False),
        ("lake", False),
    ],
)
def test_rendered_object_grant_matches_only_keys_under_the_prefix(key: str, allowed: bool) -> None:
    # IAM's '*' matches any characters, '/' included, as fnmatchcase does.
    pattern = _render(LAKE_OBJECTS, "acme-lake", "lake")
    assert fnmatch.fnmatchcase(f"arn:aws:s3:::acme-lake/{key}", pattern) is allowed


@pytest.mark.parametrize(
    ("list_prefix", "allowed"),
    [
        ("lake/", True),
        ("lake/topics/orders/_delta_log/", True),
        ("lake", False),
        ("lake-backup/", False),
        ("", False),
    ],
)
def test_rendered_list_grant_matches_only_prefixes_under_the_lake(
    list_prefix: str, allowed: bool
) -> None:
    pattern = _render(LAKE_LIST_PREFIX, "acme-lake", "lake")
    assert fnmatch.fnmatchcase(list_prefix, pattern) is allowed
