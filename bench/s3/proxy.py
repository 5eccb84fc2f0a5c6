"""What the S3 requests that ``bench/harness/s3_proxy.py`` counts cost, at list prices.

The proxy itself lives in the harness, which the benchmarks and the tests share;
its latency profiles are named here too, for ``python -m bench.s3``.
"""

from __future__ import annotations

from bench.harness.s3_proxy import PROFILES

__all__ = ["PROFILES", "usd"]

# Billed as PUT (S3 Standard: $0.005 per 1,000) and as GET ($0.0004 per 1,000);
# DELETE is free. Express One Zone: $0.00113 and $0.00003 (aws.amazon.com/s3/pricing).
PUT_CLASS = ("put", "post", "list")
GET_CLASS = ("get", "head")
USD_PER_1000 = {
    "standard": {"put": 0.005, "get": 0.0004},
    "express": {"put": 0.00113, "get": 0.00003},
}


def usd(kinds: dict[str, int], tier: str = "standard") -> float:
    prices = USD_PER_1000[tier]
    put = sum(kinds.get(k, 0) for k in PUT_CLASS)
    get = sum(kinds.get(k, 0) for k in GET_CLASS)
    return (put * prices["put"] + get * prices["get"]) / 1000
