"""file:// sources: containment in IMPORT_DIR is decided before the file is looked at."""

from __future__ import annotations

import pytest

from pipelines.ingest.sources import import_path
from yana.errors import YanaError


def _refusal(uri: str, import_dir) -> YanaError:
    with pytest.raises(YanaError) as exc:
        import_path(uri, import_dir)
    return exc.value


def test_outside_paths_answer_the_same_whether_they_exist_or_not(tmp_path):
    base = tmp_path / "imports"
    base.mkdir()
    (tmp_path / "secret.txt").write_text("x")
    existing = _refusal(f"file://{tmp_path / 'secret.txt'}", base)
    missing = _refusal(f"file://{tmp_path / 'no-such-file.txt'}", base)
    assert (existing.code, existing.message, existing.status) == (missing.code, missing.message, missing.status)
    assert existing.code == "PATH_NOT_ALLOWED"
    dotdot_existing = _refusal("../secret.txt", base)
    dotdot_missing = _refusal("../nothing-here.txt", base)
    assert dotdot_existing.code == dotdot_missing.code == "PATH_NOT_ALLOWED"


def test_symlink_out_of_the_folder_is_refused_and_inside_files_are_read(tmp_path):
    base = tmp_path / "imports"
    base.mkdir()
    (tmp_path / "outside.png").write_bytes(b"x")
    (base / "link.png").symlink_to(tmp_path / "outside.png")
    (base / "ok.png").write_bytes(b"y")
    assert _refusal(f"file://{base / 'link.png'}", base).code == "PATH_NOT_ALLOWED"
    assert import_path(f"file://{base / 'ok.png'}", base) == (base / "ok.png").resolve()
    assert _refusal(f"file://{base / 'missing.png'}", base).code == "FILE_NOT_FOUND"
