"""A Spark Connect client speaking the protocol directly: ``python connect_client.py PORT SQL``.

PySpark's own client needs pandas, which lakepubsub does not install; the
protocol's message classes ship with pyspark, so this loads them without the
client package's dependency check and prints the query's rows as JSON lines.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
import uuid
from pathlib import Path

import grpc
import pyarrow as pa
import pyspark


def protocol() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    package = types.ModuleType("pyspark.sql.connect")
    package.__path__ = [str(Path(pyspark.__file__).parent / "sql" / "connect")]
    sys.modules["pyspark.sql.connect"] = package  # skip the client's pandas check
    names = ("base_pb2", "base_pb2_grpc", "relations_pb2")
    base, stubs, relations = (
        importlib.import_module(f"pyspark.sql.connect.proto.{n}") for n in names
    )
    return base, stubs, relations


def main() -> None:
    port, query = sys.argv[1], sys.argv[2]
    base, stubs, relations = protocol()
    request = base.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base.UserContext(user_id="lakepubsub-test"),
        plan=base.Plan(root=relations.Relation(sql=relations.SQL(query=query))),
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for response in stubs.SparkConnectServiceStub(channel).ExecutePlan(request):
            if response.HasField("arrow_batch"):
                for row in pa.ipc.open_stream(response.arrow_batch.data).read_all().to_pylist():
                    print(json.dumps(row, default=str))


if __name__ == "__main__":
    main()
