"""The deferred reads' sender (tasks.ocr.send_deferred_reads, run by every worker's maintenance
loop): nothing is claimed while the ocr queue already holds a backlog (no OCR worker consuming
it), so reads claimed again after their lease never pile up there. Real Redis (its own database:
the messages pushed here never reach a worker)."""

from __future__ import annotations

import redis

from pipelines.ingest.keys import DEFERRED_READS_KEY
from tasks import ocr
from yana.settings import get_settings


def test_no_claim_while_the_ocr_queue_holds_a_backlog(redis_url):
    r = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/9", decode_responses=True)
    r.flushdb()
    s = get_settings().model_copy(update={"ocr_mode": "auto"})
    r.zadd(DEFERRED_READS_KEY, {"label_a": 1.0})
    r.rpush(ocr.OCR_QUEUE, *["message"] * (ocr.DEFERRED_MAX_WAITING + 1))
    assert ocr.send_deferred_reads(r, s) == 0
    assert r.zscore(DEFERRED_READS_KEY, "label_a") == 1.0, "not claimed: its lease did not start"
    off = s.model_copy(update={"ocr_mode": "always"})
    r.delete(ocr.OCR_QUEUE)
    assert ocr.send_deferred_reads(r, off) == 0, "only OCR_MODE=auto defers"
    r.flushdb()
