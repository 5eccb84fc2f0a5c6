"""The gRPC door: Google Pub/Sub's gRPC API (and IAMPolicy) beside REST, on the same port."""

from api.grpc.door import GrpcDoor
from api.grpc.oneport import OnePortProtocol

__all__ = ["GrpcDoor", "OnePortProtocol"]
