"""`yana ingest`'s counts, bar and rate are true in every outcome: files never sent or never
followed are not "done" (the bar does not reach 100 % for them), an Idempotency replay of an
earlier run gives no images/s rate (nothing was processed now), and the dedup report names the
files as the user uploaded them, in captions that wrap inside their figure."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from cli import data


def _batch(root: Path, names: list[str], **kw) -> data.BatchResult:
    return data.BatchResult([root / n for n in names], **kw)


def test_unsent_files_are_unknown_not_done(tmp_path):
    tally = data.Tally()
    tally.add(_batch(tmp_path, ["a.jpg", "b.jpg"], job_id="j1", outcomes=[{"id": "x"}, {"dedup": True}]), tmp_path)
    tally.add(_batch(tmp_path, ["c.jpg", "d.jpg", "e.jpg"], unknown="API unreachable"), tmp_path)
    assert (tally.indexed, tally.dedup, tally.unknown) == (1, 1, 3)
    assert tally.known == 2  # the bar's progress: 2 of 5, never 5 of 5
    assert tally.rate(1.0) == 2.0


def test_labels_read_after_the_ingest_are_said(tmp_path, monkeypatch):
    tally = data.Tally()
    outcomes = [{"id": "x", "read": "deferred"}, {"id": "y", "read_text": "獺祭"}, {"dedup": True}]
    tally.add(_batch(tmp_path, ["a.jpg", "b.jpg", "c.jpg"], job_id="j1", outcomes=outcomes), tmp_path)
    assert (tally.indexed, tally.read_later) == (2, 1)
    text = _summary(tally, 1.0, monkeypatch)
    assert "1 label(s) sent with their brand, product and brewery are read after the ingest" in text


def _summary(tally: data.Tally, elapsed: float, monkeypatch) -> str:
    """What `yana ingest` prints at the end for this tally."""
    buf = io.StringIO()
    monkeypatch.setattr(data, "out", Console(file=buf, width=200))

    class Link:
        outages = 0
        url = "http://x"

    data._print_summary(tally, elapsed, Link())
    return buf.getvalue()


def test_a_replay_of_an_earlier_run_has_no_rate(tmp_path, monkeypatch):
    tally = data.Tally()
    outcomes = [{"id": "x"}] * 3
    tally.add(_batch(tmp_path, ["a.jpg", "b.jpg", "c.jpg"], job_id="j1", replayed=True, outcomes=outcomes), tmp_path)
    assert tally.known == 3 and tally.rate(0.01) is None
    text = _summary(tally, 0.01, monkeypatch)
    assert "300.0" not in text and "Idempotency replays" in text
    row = next(line for line in text.splitlines() if "0.0" in line and "│" in line)
    assert row.rstrip(" │").endswith("-"), row  # images/s column: "-"
    # a resent batch (same run, lost answer) was processed now: it counts in the rate
    tally2 = data.Tally()
    tally2.add(_batch(tmp_path, ["a.jpg"], job_id="j2", replayed=True, resent=True, outcomes=[{"id": "x"}]), tmp_path)
    assert tally2.rate(1.0) == 1.0


def test_dedup_report_names_uploaded_files_and_wraps_captions():
    long_name = "a-very-long-uploaded-file-name-without-any-space-" * 3 + ".jpg"
    groups = [
        {
            "kept": {"id": "label_1", "brand_name": "獺祭", "file_name": "kept-upload.jpg", "phash": "ff"},
            "duplicates": [{"file_name": long_name, "distance": 3, "at": "2026-11-25T00:00:00Z"}],
        }
    ]
    page = data.render_dedup_report(groups, 1, 1, "http://x")
    assert "kept-upload.jpg" in page and long_name in page
    assert "overflow-wrap:anywhere" in page and "width:170px" in page
