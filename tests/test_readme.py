"""README.md is executable: every command in its ```bash blocks is run here against the test
stack, or listed below with the reason it is not (and where it is run instead)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
VENV = Path(sys.executable).parent.parent  # README's `.venv`

INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[dev]"'
# Commands not run by the README test, and why. Each says where it is covered.
APT = "apt-get install -y $(cat packages.apt)"
NOT_RUN = {
    APT: "system packages, as root: .ci/run runs it",
    INSTALL: "install: .ci/run runs it",
    ".venv/bin/yana up": "runs until stopped: tests/test_cli_up.py starts it, uses it and stops it",
    ".venv/bin/pytest -m unit -q -n 2": "the test suite itself: .ci/run runs it",
    '.venv/bin/pytest -m "not unit" -n 2': "the test suite itself: .ci/run runs it",
    ".venv/bin/ruff check .": "a gate: .ci/run runs it",
    ".venv/bin/ruff format --check .": "a gate: .ci/run runs it",
    ".venv/bin/lint-imports": "a gate: .ci/run runs it",
    ".venv/bin/mypy": "a gate: .ci/run runs it",
    ".venv/bin/bandit -q -r api pipelines tasks workers yana cli clients tools -ll": "a gate: .ci/run runs it",
}
IN_CI = (
    APT,
    INSTALL,
    ".venv/bin/pytest -m unit -q -n 2",
    '.venv/bin/pytest -m "not unit" -n 2',
    ".venv/bin/ruff check .",
    ".venv/bin/ruff format --check .",
    ".venv/bin/lint-imports",
    ".venv/bin/mypy",
    ".venv/bin/bandit -q -r api pipelines tasks workers yana cli clients tools -ll",
)


def readme_commands() -> list[str]:
    """Each command line of README's ```bash blocks, in order (continuation lines joined)."""
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                cmds.append(line.strip())
    return cmds


def _bare(cmd: str) -> str:
    """The command without its trailing `# comment`."""
    return re.sub(r"\s+#\s[^'\"]*$", "", cmd).strip()


def runnable() -> list[str]:
    return [c for c in readme_commands() if _bare(c) not in NOT_RUN]


def test_every_readme_command_is_run_or_listed_with_a_reason():
    cmds = [_bare(c) for c in readme_commands()]
    assert cmds, "no ```bash block found"
    for cmd in cmds:
        known = cmd in NOT_RUN or cmd.startswith(("curl ", ".venv/bin/yana sample-labels", ".venv/bin/yana ingest"))
        known = known or cmd.startswith(".venv/bin/yana dedup-report")
        assert known, f"README command neither run by tests/test_readme.py nor listed in NOT_RUN: {cmd}"
    assert set(NOT_RUN) <= set(cmds), f"NOT_RUN lists commands README no longer has: {set(NOT_RUN) - set(cmds)}"
    ci = (REPO / ".ci" / "run").read_text()
    for cmd in IN_CI:
        assert re.search(rf"^{re.escape(cmd)}(\s|$)", ci, re.M), f".ci/run does not run {cmd!r}"


@pytest.mark.stack
def test_readme_first_hour_commands_run_against_the_stack(stack, tmp_path):
    """sample-labels, ingest, the curl calls and dedup-report exactly as README writes them, in a
    fresh folder, against the test stack (the API URL as YANA_API_URL, which `yana up` would have
    written to ./data/up.env; curl's localhost:8000 replaced by the test API's address)."""
    (tmp_path / ".venv").symlink_to(VENV, target_is_directory=True)
    host_port = stack.api_url.removeprefix("http://")
    env = {**stack.env, "YANA_API_URL": stack.api_url, "DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    for cmd in runnable():
        shell = cmd.replace("localhost:8000", host_port)
        run = subprocess.run(["bash", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
        assert run.returncode == 0, f"{cmd}\n{run.stdout}\n{run.stderr}"
        if cmd.startswith("curl "):
            body = json.loads(run.stdout)  # a raw UTF-8 query answered with a plain-text 400 fails here
            assert "error" not in body, (cmd, body)
            if "/v1/search" in cmd:
                assert body["hits"], (cmd, body)
            if "/v1/chat" in cmd:
                assert body["reply"], body
        if cmd.startswith(".venv/bin/yana ingest"):
            assert "ingest summary" in run.stdout and run.stderr.startswith(f"yana API {stack.api_url}")
        if cmd.startswith(".venv/bin/yana dedup-report"):
            assert "<h1>Near-duplicate groups</h1>" in (tmp_path / "dedup.html").read_text(encoding="utf-8")
    assert (tmp_path / "labels" / "labels.jsonl").is_file()
