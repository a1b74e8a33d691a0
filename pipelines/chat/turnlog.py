"""The per-turn JSON-lines log: the logged subset of the state plus what the turn did, PII-masked.

Written twice on purpose: to the process's JSON-lines logger ("yana.chat", with run_id / trace_id) and
to a day file `chat-YYYY-MM-DD.jsonl` under CHAT_LOG_DIR (default DATA_DIR/logs), which is what an
operator reads (and what a `logs/today` resource can expose). One write(2) per line with O_APPEND, so
several API processes can share the file.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import orjson

from pipelines.chat.pii import mask_obj

log = logging.getLogger("yana.chat")

TEXT_KEYS = {"user_text", "reply", "topic", "filters", "slots", "tool", "last_error", "context_run_id"}


class TurnLog:
    def __init__(self, directory: Path | None) -> None:
        self.directory = Path(directory) if directory else None

    def path_for(self, t: float | None = None) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / time.strftime("chat-%Y-%m-%d.jsonl", time.gmtime(t or time.time()))

    def write(self, record: dict) -> None:
        # Free text is masked again here (the graph masked it already): ids and numbers are left alone.
        record = {k: mask_obj(v) if k in TEXT_KEYS else v for k, v in record.items()}
        log.info("chat turn", extra={"chat": record})
        path = self.path_for()
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
            try:
                os.write(fd, orjson.dumps(record, default=str) + b"\n")
            finally:
                os.close(fd)
        except OSError as exc:  # a full disk must not fail the reply
            log.warning("chat turn log not written", extra={"error": str(exc)})
