"""A real S3 HTTP server on loopback for tests and benches: moto's standalone server
(`python -m moto.server`), a separate process speaking the S3 REST API that boto3, MinIO clients
and the AWS CLI speak. Nothing in yana knows it is moto: it is reached by AWS_ENDPOINT_URL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cli.processes import free_port

KEYS = {
    "AWS_ACCESS_KEY_ID": "yana-test",
    "AWS_SECRET_ACCESS_KEY": "yana-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    url: str
    proc: subprocess.Popen
    buckets: list[str] = field(default_factory=list)

    def env(self, bucket: str, prefix: str = "yana") -> dict[str, str]:
        """What a yana process needs to use this server as its blob store (BLOB_URL + AWS_*)."""
        return {**KEYS, "AWS_ENDPOINT_URL": self.url, "BLOB_URL": f"s3://{bucket}/{prefix}"}

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
            region_name=KEYS["AWS_DEFAULT_REGION"],
            config=Config(
                connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}, s3={"addressing_style": "path"}
            ),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents") or []]
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_s3(log_dir: Path, timeout_s: float = 30.0) -> S3Server:
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / "s3.log").open("ab")
    env = {**os.environ, **KEYS}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}; see {log_dir / 's3.log'}")
        try:
            httpx.get(url + "/moto-api/", timeout=1.0)
            return S3Server(url, proc)
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"moto server did not answer on {url} within {timeout_s}s")
