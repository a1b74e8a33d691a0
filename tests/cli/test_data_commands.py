"""The data commands without an API: they say which instance they tried, in one line, and exit 3;
where the API URL comes from; `ingest` names the files that lack a category. (Unit tier.)"""

from __future__ import annotations

import os
import socket

import pytest
from typer.testing import CliRunner

from cli import api_link
from cli import main as cli_main


@pytest.fixture()
def dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli_main.app, list(args), env={"COLUMNS": "300", **(env or {})})


@pytest.fixture()
def images(tmp_path):
    for name in ("a.jpg", "sub/b.png", "c.webp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"not really an image")
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ("ingest", "{images}", "--category", "sake"),
        ("dedup-report", "--out", "{images}/r.html"),
        ("reembed", "--model", "x"),
        ("collections", "list"),
        ("collections", "drop", "old"),
    ],
)
def test_unreachable_api_is_one_line_with_the_url_and_exit_3(args, dead_url, images):
    res = _run(*(a.format(images=images) for a in args), "--api", dead_url)
    assert res.exit_code == api_link.EXIT_UNREACHABLE, (res.stdout, res.stderr, res.exception)
    lines = res.stderr.splitlines()
    assert lines[0] == f"yana API {dead_url}  (from --api)"
    assert len(lines) == 2 and lines[1].startswith(f"cannot reach the yana API at {dead_url} (ConnectError")
    assert "Traceback" not in res.stdout + res.stderr
    assert not (images / "r.html").exists()


def test_missing_category_names_the_files(images, tmp_path):
    meta = tmp_path / "labels.jsonl"
    meta.write_text('{"file": "sub/b.png", "category": "juice"}\n', encoding="utf-8")
    res = _run("ingest", str(images), "--meta", str(meta), "--api", "http://127.0.0.1:9")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        "no category for 2 of 3 files: a.jpg, c.webp. Give --category sake|juice, or a category column in --meta "
        "for each of them."
    ]


def test_api_url_comes_from_flag_env_up_env_or_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("YANA_API_URL", raising=False)
    # _load_up_env sets what is unset (YANA_API_URL, REDIS_URL): monkeypatch has recorded both
    # above, so it puts them back after the test.
    monkeypatch.setenv("REDIS_URL", os.environ.get("REDIS_URL", ""))
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("API_PORT", "8123")
    from yana.settings import get_settings

    get_settings.cache_clear()
    try:
        assert api_link.resolve_api(None)[0] == "http://127.0.0.1:8123"
        (tmp_path / "up.env").write_text("YANA_API_URL=http://127.0.0.1:7001\nREDIS_URL=redis://127.0.0.1:7002/0\n")
        cli_main._load_up_env()  # what `yana <data command>` does first
        assert api_link.resolve_api(None) == ("http://127.0.0.1:7001", f"{tmp_path / 'up.env'} (written by `yana up`)")
        monkeypatch.setenv("YANA_API_URL", "http://api.example:80/")
        assert api_link.resolve_api(None) == ("http://api.example:80", "YANA_API_URL")
        assert api_link.resolve_api("http://other:1") == ("http://other:1", "--api")
    finally:
        get_settings.cache_clear()


def test_help_lines_do_not_break_mid_sentence():
    res = _run("--help", env={"COLUMNS": "200"})
    assert res.exit_code == 0
    up_line = next(line for line in res.stdout.splitlines() if " up " in line)
    assert "one worker on every queue" in up_line  # the whole first paragraph on one line at this width
    up_help = _run("up", "--help", env={"COLUMNS": "200"}).stdout
    assert "Celery worker processes (jobs run at once) in the pool of the one worker" in up_help
