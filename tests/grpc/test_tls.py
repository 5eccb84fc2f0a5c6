"""TLS on the one port: ALPN picks gRPC (h2) or REST (http/1.1) for each connection."""

from __future__ import annotations

import datetime
import ssl
import subprocess
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.pubsub_v1.types import pubsub as ps
from grpckit import LAKEPUBSUB
from support import free_port, wait_for_port

from lakepubsub import errors
from lakepubsub.settings.doors import GrpcListen


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_grpc_and_rest_over_tls_on_one_port(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        [LAKEPUBSUB, "--lake", str(tmp_path / "lake"), "serve", "--port", str(port),
         "--tls-cert", str(cert), "--tls-key", str(key), "--log-level", "warning"],
    )  # fmt: skip
    try:
        wait_for_port(port)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
            create = channel.unary_unary(
                "/google.pubsub.v1.Publisher/CreateTopic",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=ps.Topic.pb().FromString,
            )
            topic = create(ps.Topic.pb()(name="projects/demo/topics/secure"), timeout=30)
        assert topic.name == "projects/demo/topics/secure"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as http:
            got = http.get(f"https://localhost:{port}/v1/projects/demo/topics/secure")
        assert got.json()["name"] == "projects/demo/topics/secure"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_grpc_port_of_its_own_serves_tls_and_plain_grpc(tmp_path: Path) -> None:
    """``serve --grpc-port``: gRPC also on a port of its own (no relay), over TLS when
    the server has a certificate; what it does is seen through the shared port."""
    cert, key = _self_signed(tmp_path)
    port, grpc_port, plain_port, plain_grpc = free_port(), free_port(), free_port(), free_port()
    secure = subprocess.Popen(
        [LAKEPUBSUB, "--lake", str(tmp_path / "lake"), "serve", "--port", str(port),
         "--grpc-port", str(grpc_port), "--tls-cert", str(cert), "--tls-key", str(key),
         "--log-level", "warning"],
    )  # fmt: skip
    plain = subprocess.Popen(
        [LAKEPUBSUB, "--lake", str(tmp_path / "lake2"), "serve", "--port", str(plain_port),
         "--grpc-port", str(plain_grpc), "--log-level", "warning"],
    )  # fmt: skip
    try:
        wait_for_port(grpc_port)
        wait_for_port(plain_grpc)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{grpc_port}", credentials) as channel:
            topic = _create_topic(channel, "projects/demo/topics/direct")
        assert topic.name == "projects/demo/topics/direct"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as http:
            got = http.get(f"https://localhost:{port}/v1/projects/demo/topics/direct")
        assert got.json()["name"] == "projects/demo/topics/direct"
        with grpc.insecure_channel(f"127.0.0.1:{plain_grpc}") as channel:
            assert _create_topic(channel, "projects/demo/topics/plain").name.endswith("/plain")
        got = httpx.get(f"http://127.0.0.1:{plain_port}/v1/projects/demo/topics/plain")
        assert got.status_code == 200
    finally:
        for process in (secure, plain):
            process.terminate()
            process.wait(timeout=30)


def _create_topic(channel: grpc.Channel, name: str) -> Any:
    create = channel.unary_unary(
        "/google.pubsub.v1.Publisher/CreateTopic",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=ps.Topic.pb().FromString,
    )
    return create(ps.Topic.pb()(name=name), timeout=30)


@pytest.mark.parametrize(
    "env",
    [
        {"LAKEPUBSUB_GRPC_ADDRESS": "8443"},
        {"LAKEPUBSUB_GRPC_ADDRESS": "host:port"},
        {"LAKEPUBSUB_GRPC_ADDRESS": "host:70000"},
        {"LAKEPUBSUB_GRPC_ADDRESS": "h:1", "LAKEPUBSUB_GRPC_TLS_CERT": "c.pem"},
    ],
)
def test_a_bad_grpc_address_or_half_a_certificate_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidArgument):
        GrpcListen.from_env(env)
    assert (
        GrpcListen.from_env({"LAKEPUBSUB_GRPC_ADDRESS": "0.0.0.0:8443"}).address == "0.0.0.0:8443"
    )
