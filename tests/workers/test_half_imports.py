"""A cancel (SIGUSR1) or a time limit can land inside an import a job body makes: Python drops the
package whose import raised but keeps the submodules it had loaded, and every later import of the
package in that process finds them without binding them to it. JobTask drops such orphans after an
interrupted body (workers.base_task.purge_half_imported)."""

from __future__ import annotations

import importlib
import sys

import pytest

from workers.base_task import purge_half_imported


@pytest.fixture()
def package(tmp_path, monkeypatch):
    pkg = tmp_path / "halfpkg"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from .inner.sub import VALUE\nimport os\nif os.environ.get('HALFPKG_CUT'):\n"
        "    raise KeyboardInterrupt('the cancel lands here')\n",
        encoding="utf-8",
    )
    (pkg / "inner" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "inner" / "sub.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "halfpkg"
    for name in [n for n in sys.modules if n == "halfpkg" or n.startswith("halfpkg.")]:
        del sys.modules[name]


def _cut_short(monkeypatch, name: str) -> None:
    monkeypatch.setenv("HALFPKG_CUT", "1")
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)
    monkeypatch.delenv("HALFPKG_CUT")


@pytest.mark.parametrize("purge", [True, False])
def test_an_import_cut_short_imports_whole_after_the_purge(package, monkeypatch, purge):
    _cut_short(monkeypatch, package)
    assert package not in sys.modules and f"{package}.inner.sub" in sys.modules
    if purge:
        assert purge_half_imported() == [f"{package}.inner", f"{package}.inner.sub"]
        assert importlib.import_module(package).inner.sub.VALUE == 1
    else:  # what a later job met before: the package without its submodule (how this can fail)
        with pytest.raises(AttributeError, match="inner"):
            importlib.import_module(package).inner  # noqa: B018 - the attribute access is the test
