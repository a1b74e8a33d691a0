"""`yana prepare`'s kernels step is keyed so that a new clone at a path used before compiles again."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from pipelines.prepare import steps


def test_the_kernels_key_says_whether_numbas_cache_files_are_there(tmp_path, monkeypatch):
    """The same numba, sources and path, but an empty __pycache__ (a clone removed and made again
    at the same path): another key, so the step runs; with the index files back, the same key."""
    for name in ("kernels", "index", "verifier"):
        (tmp_path / f"{name}.py").write_text(f"# {name}\n")
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: SimpleNamespace(origin=str(tmp_path / f"{name.rsplit('.', 1)[-1]}.py")),
    )
    settings = steps.get_settings()
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    for f in ("kernels._step-10.py311.nbi", "index._search-20.py311.nbi"):
        (cache / f).write_text("")
    compiled = steps._kernels_fingerprint(settings)
    for f in cache.iterdir():
        f.unlink()
    assert steps._kernels_fingerprint(settings) != compiled
    (cache / "kernels._step-10.py311.nbi").write_text("")
    (cache / "index._search-20.py311.nbi").write_text("")
    assert steps._kernels_fingerprint(settings) == compiled
