"""SSRF rules, signing and the retry schedule, without a running stack."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from standardwebhooks.webhooks import Webhook

from pipelines.safe_http import resolve_target
from pipelines.webhooks import backoff_s, schedule_span_s, sign
from yana.errors import YanaError
from yana.settings import Settings


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/x", "http://localhost:9/x", "http://[::1]/x", "http://10.0.0.1/", "http://172.16.5.4/",
     "http://192.168.1.1/", "http://169.254.169.254/", "http://100.64.0.1/", "http://0.0.0.0/", "http://[fe80::1]/",
     "http://[::ffff:127.0.0.1]/", "file:///etc/passwd", "http://user:pw@example.com/"],
)
def test_private_and_odd_targets_refused(url):
    with pytest.raises(YanaError) as exc:
        resolve_target(url, [])
    assert exc.value.status == 400


def test_allow_list_admits_loopback_by_cidr_or_host():
    assert resolve_target("http://127.0.0.1:8080/h", ["127.0.0.0/8"]).address == "127.0.0.1"
    assert resolve_target("http://localhost:8080/h", ["localhost"]).address in ("127.0.0.1", "::1")
    with pytest.raises(YanaError):
        resolve_target("http://10.0.0.1/h", ["127.0.0.0/8"])


def test_public_address_accepted_without_allow_list():
    t = resolve_target("https://93.184.215.14/hook", [])
    assert t.address == "93.184.215.14" and t.port == 443


def test_signature_verifies_with_standard_webhooks():
    secret = Settings().webhook_secret
    ts = datetime.now(timezone.utc).replace(microsecond=0)
    sig = sign(secret, "msg_1", ts, '{"a":1}')
    assert sig.startswith("v1,")
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(ts.timestamp())), "webhook-signature": sig}
    assert Webhook(secret).verify('{"a":1}', headers) == {"a": 1}


def test_default_schedule_spans_more_than_a_day():
    s = Settings()
    assert schedule_span_s(s.webhook_max_attempts, s.webhook_backoff_base_s, s.webhook_backoff_max_s) >= 24 * 3600
    assert backoff_s(1, 5, 100) == 5 and backoff_s(2, 5, 100) == 10 and backoff_s(10, 5, 100) == 100
