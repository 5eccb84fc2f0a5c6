"""The S3 meter counts what the lake sends (its boto3 client and its object
layer), as a counting proxy in front of a real (moto) S3 sees it, and prices it
at S3 Standard list prices."""

from __future__ import annotations

import pytest

from bench.harness.s3_proxy import S3Proxy
from lakepubsub._lake import Lake
from lakepubsub._lake.meter import METER, cost_usd, kind_of

pytestmark = pytest.mark.s3


def test_the_meter_counts_each_request_by_kind_as_the_proxy_sees_it(
    proxied_lake: tuple[Lake, S3Proxy],
) -> None:
    lake, proxy = proxied_lake
    lake.s3_client()  # made (and watched) before the count starts
    before = METER.reading().counts
    proxy.reset()

    objects = lake.objects
    log = lake.uri("topics", "t1", "messages", "_delta_log")
    assert objects.put_if_absent(f"{log}/00000000000000000000.json", b"{}\n")  # PUT
    assert not objects.put_if_absent(f"{log}/00000000000000000000.json", b"{}\n")  # PUT, 412
    objects.put(lake.uri("topics", "t1", "messages", "part-0.parquet"), b"x" * 100)  # PUT
    objects.replace(lake.uri("topics", "t1", "messages", "_last"), b"1")  # PUT
    assert objects.read(lake.uri("topics", "t1", "messages", "_last")) == b"1"  # GET
    assert objects.read(f"{log}/00000000000000000001.json") is None  # GET, 404
    assert objects.exists(f"{log}/00000000000000000000.json")  # HEAD
    assert not objects.exists(f"{log}/00000000000000000009.json")  # HEAD, 404
    assert lake.list_dirs("topics") == ["t1"]  # LIST
    objects.delete(lake.uri("topics", "t1", "messages", "_last"))  # POST (DeleteObjects)
    lake.remove_tree("topics")  # LIST, then POST (DeleteObjects)

    seen = {k: int(v) for k, v in dict(proxy.counts()["kinds"]).items()}  # type: ignore[call-overload]
    # The process's meter: the Lake's boto3 client (listings, bulk deletes) and
    # its object layer (obstore) report to it.
    after = METER.reading().counts
    counted = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
    assert counted == seen == {"put": 4, "get": 2, "head": 2, "list": 2, "post": 2}
    assert cost_usd(counted) == pytest.approx((4 + 2 + 2) * 0.005 / 1000 + 4 * 0.0004 / 1000)


def test_kinds_and_prices() -> None:
    assert kind_of("PUT", "PutObject") == "put"
    assert kind_of("PUT", "CopyObject") == "copy"
    assert kind_of("GET", "ListObjectsV2") == "list"
    assert kind_of("GET", "GetObject") == "get"
    assert kind_of("POST", "DeleteObjects") == "post"
    assert kind_of("DELETE", "DeleteObject") == "delete"
    # 1,000 PUTs and 1,000 GETs at S3 Standard list prices; DELETE is free.
    assert cost_usd({"put": 1000, "get": 1000, "delete": 1000}) == pytest.approx(0.0054)
    assert cost_usd({"list": 2000, "head": 5000}) == pytest.approx(0.012)
