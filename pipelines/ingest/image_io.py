"""Safe image decoding and storage of the original bytes.

Decoding refuses, before any pixel is decompressed: more than MAX_IMAGE_BYTES, a type other than
JPEG / PNG / WebP / GIF (sniffed from magic bytes, not the file name or the client's content type),
and a header announcing more than MAX_IMAGE_PIXELS (decompression bomb). A file that then fails to
decode (truncated, corrupt) is CORRUPT_IMAGE. Animated GIFs use their first frame; EXIF rotation is
applied so a rotated phone photo hashes like its upright twin.

Each error is a YanaError whose code names the problem; the ingest job records it on the item.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps

from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError, describe

FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif"}


@dataclass
class DecodedImage:
    image: Image.Image  # RGB, first frame, EXIF-upright
    format: str  # one of FORMATS
    width: int
    height: int


def sniff_format(data: bytes) -> str | None:
    """The image type by its magic bytes, or None when it is none we accept."""
    head = data[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    return None


def check_bytes(data: bytes, max_bytes: int) -> str:
    """Cheap checks the API can run before accepting bytes: size cap and type. Returns the format."""
    if len(data) > max_bytes:
        raise YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"image is {len(data)} bytes; the limit is {max_bytes}")
    if not data:
        raise YanaError.of(ErrorCode.EMPTY_IMAGE, "image is empty")
    fmt = sniff_format(data)
    if fmt is None:
        raise YanaError.of(ErrorCode.UNSUPPORTED_IMAGE_TYPE, "not a JPEG, PNG, WebP or GIF image")
    return fmt


def check_header_pixels(data: bytes, max_pixels: int) -> None:
    """Refuse an image whose header already announces more than max_pixels (a decompression
    bomb), without decompressing a pixel: the API answers at submit instead of accepting a job that
    can only fail. A header that cannot be read is left to the decoder (CORRUPT_IMAGE in the job)."""
    fmt = sniff_format(data)
    if fmt is None:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[fmt]) as img:
                w, h = img.size
    except Image.DecompressionBombError as exc:
        raise YanaError.of(ErrorCode.IMAGE_TOO_MANY_PIXELS, f"decompression bomb refused: {exc}") from exc
    except Exception:  # noqa: BLE001 - unreadable header: the job's decoder judges it
        return
    if w * h > max_pixels:
        raise YanaError.of(
            ErrorCode.IMAGE_TOO_MANY_PIXELS,
            f"image is {w}x{h} pixels; the limit is {max_pixels} (decompression bomb guard)",
        )


def decode_image(data: bytes, *, max_bytes: int, max_pixels: int) -> DecodedImage:
    fmt = check_bytes(data, max_bytes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=[fmt])
            w, h = img.size
            if w <= 0 or h <= 0:
                raise YanaError.of(ErrorCode.CORRUPT_IMAGE, "image has no pixels")
            if w * h > max_pixels:
                raise YanaError.of(
                    ErrorCode.IMAGE_TOO_MANY_PIXELS,
                    f"image is {w}x{h} pixels; the limit is {max_pixels} (decompression bomb guard)",
                )
            if getattr(img, "n_frames", 1) > 1:
                img.seek(0)
            img.load()
            rgb = ImageOps.exif_transpose(img).convert("RGB")
    except YanaError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise YanaError.of(ErrorCode.IMAGE_TOO_MANY_PIXELS, f"decompression bomb refused: {exc}") from exc
    except Exception as exc:  # UnidentifiedImageError, OSError (truncated), SyntaxError, struct.error...
        raise YanaError.of(ErrorCode.CORRUPT_IMAGE, f"cannot decode {fmt} image: {describe(exc)}") from exc
    return DecodedImage(rgb, fmt, rgb.width, rgb.height)


def image_relpath(sha1: str, fmt: str) -> str:
    """Where an image lives, relative to DATA_DIR (content-addressed: rewriting it is harmless)."""
    return f"images/{sha1[:2]}/{sha1}.{EXTENSIONS[fmt]}"


MEDIA_TYPES = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp", "gif": "image/gif"}


def store_image(blobs: BlobStore, sha1: str, fmt: str, data: bytes) -> str:
    """Keep the original bytes in the blob store (atomic put); returns the blob key, which is also
    the path relative to DATA_DIR with the local backend. Content-addressed: a second put of the
    same bytes is skipped."""
    key = image_relpath(sha1, fmt)
    have = blobs.stat(key)
    if have is not None and have.size == len(data):
        return key
    blobs.put(key, data)
    return key


def media_type(key: str) -> str:
    return MEDIA_TYPES.get(key.rsplit(".", 1)[-1].lower(), "application/octet-stream")
