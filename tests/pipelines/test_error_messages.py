"""Error messages say what failed, never an object repr or a memory address."""

from __future__ import annotations

import pytest

from pipelines.ingest import image_io
from yana.errors import YanaError, describe


def test_corrupt_image_message_has_no_object_repr():
    junk = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dXXXX" + b"\x00" * 40  # no IHDR: PIL cannot identify it
    with pytest.raises(YanaError) as exc:
        image_io.decode_image(junk, max_bytes=10**6, max_pixels=10**7)
    assert exc.value.code == "CORRUPT_IMAGE"
    msg = exc.value.message
    assert "0x" not in msg and "<_io" not in msg and " object" not in msg, msg
    assert msg.startswith("cannot decode PNG image: UnidentifiedImageError")


def test_describe_strips_reprs_and_addresses():
    class Thing:
        pass

    assert describe(OSError(f"cannot identify image file {Thing()!r}")) == "OSError: cannot identify image file"
    assert describe(ValueError("bad pointer 0x7f62c777c950 here")) == "ValueError: bad pointer here"
    assert describe(KeyError()) == "KeyError"
    assert len(describe(RuntimeError("x" * 1000), 50)) <= len("RuntimeError: ") + 50
