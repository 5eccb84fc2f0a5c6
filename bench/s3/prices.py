"""S3 list prices for what the benchmarks count, written once.

S3 Standard's request prices are the product's own (``lakepubsub/_lake/meter.py``,
which meters a process's requests); Express One Zone's and storage are only the
benchmarks' concern. The proxy's latency profiles are named here too, for
``python -m bench s3``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.harness.s3_proxy import PROFILES
from lakepubsub._lake.meter import USD_PER_1000 as STANDARD_USD_PER_1000

__all__ = ["PROFILES", "STANDARD_USD_PER_1000", "usd"]

# aws.amazon.com/s3/pricing, us-east-1, as of this month; not re-checked when a report is written.
AS_OF = "2026-11"
# Express One Zone per 1,000 requests: PUT class $0.00113, GET class $0.00003.
EXPRESS_USD_PER_1000 = {
    **dict.fromkeys(("put", "copy", "post", "list"), 0.00113),
    **dict.fromkeys(("get", "head"), 0.00003),
    "delete": 0.0,
}
# S3 Standard storage, first 50 TB, USD per GB-month.
STORAGE_USD_PER_GB_MONTH = 0.023
TIERS = {"standard": STANDARD_USD_PER_1000, "express": EXPRESS_USD_PER_1000}


def usd(kinds: Mapping[str, float], tier: str = "standard") -> float:
    """What ``kinds`` requests cost (kinds not priced: as GET)."""
    prices = TIERS[tier]
    return sum(n * prices.get(kind, prices["get"]) for kind, n in kinds.items()) / 1000


def describe() -> str:
    """The Standard request prices, as a report states them."""
    put, get = STANDARD_USD_PER_1000["put"], STANDARD_USD_PER_1000["get"]
    return (
        f"S3 Standard list prices as of {AS_OF} (us-east-1, aws.amazon.com/s3/pricing, not "
        f"re-checked when the report was written): PUT, COPY, POST and LIST ${put} per 1,000; "
        f"GET, HEAD and other requests ${get} per 1,000; DELETE free"
    )
