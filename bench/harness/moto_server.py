"""The one moto S3 server launcher: ``python -m moto.server`` on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.harness.ports import free_port, wait_for_port
from bench.harness.processes import stop

# moto accepts any keys; delta-rs needs AWS_ALLOW_HTTP for its plain-HTTP endpoint.
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}
# A process reaching a directory bucket (S3 Express One Zone, ``…--x-s3``) on moto
# needs this in its environment: boto3 would open an S3 Express session first,
# which moto does not serve (delta-rs and obstore open one only when told to).
DIRECTORY_BUCKET_ENV = {"AWS_S3_DISABLE_EXPRESS_SESSION_AUTH": "true"}
# moto stops at once on SIGTERM; this only bounds a stuck one before SIGKILL.
STOP_TIMEOUT_S = 10.0


class MotoServer:
    """A moto S3 server subprocess on a free port of 127.0.0.1 with ``bucket``
    created, from entering the ``with`` block to leaving it.

    In its own process, never in-process: ``DeltaTable.history()`` deadlocks
    against moto's threaded server. Its output (a line per request) goes to
    ``log`` when given, else nowhere.
    """

    def __init__(
        self, bucket: str, *, log: Path | None = None, more_buckets: tuple[str, ...] = ()
    ) -> None:
        self.bucket = bucket
        # Created too; a name ending in --x-s3 is an S3 Express One Zone directory
        # bucket, which moto serves like any other (see ``storage_options``).
        self.more_buckets = more_buckets
        self.log = log
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def storage_options(self) -> dict[str, str]:
        """How delta-rs (and ``LakeSpec``) reach the bucket."""
        return {"AWS_ENDPOINT_URL": self.endpoint, **S3_CREDENTIALS}

    def env(self) -> dict[str, str]:
        return self.storage_options

    def client(self) -> Any:
        """A boto3 client of this moto server (directory buckets too)."""
        # moto has no CreateSession, which boto3 calls for a directory bucket.
        no_session = {"disable_s3_express_session_auth": True}  # a key botocore's stubs lack
        return boto3.client(  # type: ignore[call-overload]
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_CREDENTIALS["AWS_REGION"],
            config=Config(s3=no_session),  # type: ignore[arg-type]
        )

    @property
    def pid(self) -> int:
        assert self._process is not None, "moto is not running"
        return self._process.pid

    def __enter__(self) -> MotoServer:
        port = free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        if self.log is None:
            self._process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        else:
            with self.log.open("wb") as out:
                self._process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.endpoint = f"http://127.0.0.1:{port}"
        try:
            wait_for_port(port, process=self._process)
            client = self.client()
            for bucket in (self.bucket, *self.more_buckets):
                client.create_bucket(Bucket=bucket)
        except BaseException as exc:
            self.__exit__()
            if self.log is not None:
                exc.add_note(f"moto's log:\n{self.log.read_text(errors='replace')}")
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            stop(self._process, STOP_TIMEOUT_S)
            self._process = None
