"""The blob store: bytes a process on another host must read (staged uploads, label images).

One small interface, two backends:

  LocalBlobStore   a folder (DATA_DIR): the default, one host, what `yana up` uses. A key is a
                   path relative to the folder, so `local_path(key)` is a real file.
  S3BlobStore      an S3-compatible bucket (BLOB_URL=s3://bucket/prefix): every API and worker
                   host shares it. Every call is bounded (botocore connect/read timeouts, a fixed
                   number of attempts); `local_path` is None.

Keys are relative POSIX paths: `incoming/<job>/<n>.bin` (staged uploads, deleted when the job ends,
swept when orphaned) and `images/<ab>/<sha1>.<ext>` (content-addressed: writing one again is a no-op).

Missing blobs raise `BlobMissing`; an unreachable or failing store raises YanaError
STORE_UNAVAILABLE (retryable).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol
from urllib.parse import urlparse

from yana.errors import ErrorCode, YanaError, describe

CHUNK = 256 * 1024


class BlobMissing(KeyError):
    """No blob under this key."""


@dataclass(frozen=True)
class BlobInfo:
    key: str
    size: int
    mtime: float  # seconds since the epoch


class BlobStore(Protocol):
    kind: str  # "local" | "s3"

    def put(self, key: str, data: bytes | IO[bytes]) -> None: ...

    def get(self, key: str, max_bytes: int | None = None) -> bytes: ...

    def stream(self, key: str) -> Iterator[bytes]: ...

    def stat(self, key: str) -> BlobInfo | None: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> int: ...

    def list(self, prefix: str) -> Iterator[BlobInfo]: ...

    def local_path(self, key: str) -> Path | None: ...


def check_key(key: str) -> str:
    """Keys are relative paths without `..`: a key never names anything outside the store."""
    p = PurePosixPath(key)
    if not key or p.is_absolute() or any(part in ("", ".", "..") for part in key.split("/")) or "\\" in key:
        raise ValueError(f"bad blob key {key!r}")
    return key


def _too_large(key: str, size: int, max_bytes: int) -> YanaError:
    return YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"image is {size} bytes; the limit is {max_bytes}")


# --- local folder ------------------------------------------------------------------------------


class LocalBlobStore:
    kind = "local"

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def local_path(self, key: str) -> Path | None:
        return self._path(key)

    def put(self, key: str, data: bytes | IO[bytes]) -> None:
        """Atomic: written to a temp file in the same folder, fsynced, renamed."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(data, (bytes, bytearray, memoryview)):
                    f.write(data)
                else:
                    shutil.copyfileobj(data, f, CHUNK)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        p = self._path(key)
        try:
            with p.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    raise _too_large(key, size, max_bytes)
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobMissing(key) from exc

    def stream(self, key: str) -> Iterator[bytes]:
        try:
            f = self._path(key).open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobMissing(key) from exc

        def chunks() -> Iterator[bytes]:
            with f:
                while block := f.read(CHUNK):
                    yield block

        return chunks()

    def stat(self, key: str) -> BlobInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return BlobInfo(key, st.st_size, st.st_mtime) if not os.path.isdir(self._path(key)) else None

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix: str) -> int:
        """Every blob whose key starts with `prefix` (a folder prefix ending in "/")."""
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return 0
        n = sum(1 for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder, ignore_errors=True)
        return n

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return
        for p in folder.rglob("*"):
            try:
                if p.is_file():
                    st = p.stat()
                    yield BlobInfo(p.relative_to(self.root).as_posix(), st.st_size, st.st_mtime)
            except FileNotFoundError:
                continue


# --- S3 ----------------------------------------------------------------------------------------


class S3BlobStore:
    """An S3-compatible bucket (AWS S3, MinIO, Ceph RGW, moto's server)."""

    kind = "s3"

    def __init__(self, client, bucket: str, prefix: str = ""):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def local_path(self, key: str) -> Path | None:
        return None

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise BlobMissing(key) from exc
            raise YanaError.of(
                ErrorCode.STORE_UNAVAILABLE, f"blob store {what} {key}: {code or describe(exc)}", retryable=True
            ) from exc
        except BotoCoreError as exc:
            raise YanaError.of(
                ErrorCode.STORE_UNAVAILABLE, f"blob store {what} {key}: {describe(exc)}", retryable=True
            ) from exc

    def put(self, key: str, data: bytes | IO[bytes]) -> None:
        body = io.BytesIO(bytes(data)) if isinstance(data, (bytes, bytearray, memoryview)) else data
        # upload_fileobj streams (multipart above 8 MiB) instead of holding a second copy.
        self._call("put", key, self.client.upload_fileobj, body, self.bucket, self._key(key))

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        resp = self._call("get", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        body = resp["Body"]
        try:
            size = int(resp.get("ContentLength") or 0)
            if max_bytes is not None and size > max_bytes:
                raise _too_large(key, size, max_bytes)
            return self._call("read", key, body.read)
        finally:
            body.close()

    def stream(self, key: str) -> Iterator[bytes]:
        resp = self._call("get", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        body = resp["Body"]

        def chunks() -> Iterator[bytes]:
            it = body.iter_chunks(CHUNK)
            try:
                while (block := self._call("read", key, next, it, None)) is not None:
                    yield block
            finally:
                body.close()

        return chunks()

    def stat(self, key: str) -> BlobInfo | None:
        try:
            head = self._call("head", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except BlobMissing:
            return None
        return BlobInfo(key, int(head.get("ContentLength") or 0), head["LastModified"].timestamp())

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def delete(self, key: str) -> None:
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        keys = [b.key for b in self.list(prefix)]
        for start in range(0, len(keys), 1000):
            objects = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self._call(
                "delete",
                prefix,
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": objects, "Quiet": True},
            )
        return len(keys)

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
        it = iter(pages)
        while True:
            page = self._call("list", prefix, lambda: next(it, None))
            if page is None:
                return
            for obj in page.get("Contents") or []:
                yield BlobInfo(obj["Key"][len(self.prefix) :], int(obj["Size"]), obj["LastModified"].timestamp())


def parse_s3_url(url: str) -> tuple[str, str]:
    """s3://bucket/prefix -> (bucket, prefix)."""
    u = urlparse(url)
    if u.scheme != "s3" or not u.netloc:
        raise ValueError(f"BLOB_URL must be empty (the local DATA_DIR) or s3://bucket/prefix, not {url!r}")
    return u.netloc, u.path.strip("/")


def s3_client(
    *,
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
    timeout_s: float = 10.0,
    max_attempts: int = 3,
):
    """A boto3 S3 client with bounded calls. Unset arguments are left to boto3, which reads
    AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION."""
    import boto3
    from botocore.config import Config

    custom_endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"max_attempts": max(1, max_attempts), "mode": "standard"},
        # MinIO, moto and most self-hosted servers want path-style addressing.
        s3={"addressing_style": "path" if custom_endpoint else "auto"},
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=endpoint_url or None,
        aws_access_key_id=access_key_id or None,
        aws_secret_access_key=secret_access_key or None,
        region_name=region or None,
        config=config,
    )


def open_store(
    url: str | None,
    data_dir: Path,
    *,
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
    timeout_s: float = 10.0,
    max_attempts: int = 3,
) -> BlobStore:
    if not url or url.startswith("file:") or url == "local":
        root = Path(urlparse(url).path) if url and url.startswith("file:") else Path(data_dir)
        return LocalBlobStore(root)
    bucket, prefix = parse_s3_url(url)
    client = s3_client(
        endpoint_url=endpoint_url,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
    )
    return S3BlobStore(client, bucket, prefix)
