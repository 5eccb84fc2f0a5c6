"""Labels on topics and subscriptions, validated as Google Cloud labels."""

from __future__ import annotations

import re
from collections.abc import Mapping

from lakepubsub import constants, errors

_KEY = re.compile(r"[\w\-]{1,63}", re.UNICODE)
_VALUE = re.compile(r"[\w\-]{0,63}", re.UNICODE)


def validate_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Keys start with a lowercase letter; keys and values: lowercase letters, digits, - and _."""
    if len(labels) > constants.MAX_LABELS:
        raise errors.InvalidArgument(f"at most {constants.MAX_LABELS} labels are allowed")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise errors.InvalidArgument("label keys and values must be strings")
        if not _KEY.fullmatch(key) or not key[0].islower() or key.lower() != key:
            raise errors.InvalidArgument(
                f"Invalid label key {key!r}: 1-63 lowercase letters, digits, '-' or '_', "
                "starting with a lowercase letter"
            )
        if not _VALUE.fullmatch(value) or value.lower() != value:
            raise errors.InvalidArgument(
                f"Invalid value for label {key!r}: up to 63 lowercase letters, digits, '-' or '_'"
            )
    return dict(labels)
