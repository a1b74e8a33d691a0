"""SSRF rules, signing and the retry schedule, without a running stack."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from pipelines.ingest.sources import check_url
from pipelines.runtime.safe_http import resolve_target
from pipelines.runtime.webhooks import backoff_s, schedule_span_s, sign
from yana.errors import YanaError
from yana.settings import Settings


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://localhost:9/x",
        "http://[::1]/x",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://169.254.169.254/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        # multicast, v4 and v6
        "http://224.0.0.1/",
        "http://239.255.255.250:1900/",
        "http://[ff02::1]/",
        "http://[ff0e::1]/",
        # IPv6 forms that embed a private IPv4: NAT64, translated, compatible, 6to4
        "http://[64:ff9b::7f00:1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[64:ff9b:1::a00:1]/",
        "http://[::ffff:0:127.0.0.1]/",
        "http://[::127.0.0.1]/",
        "http://[::10.0.0.1]/",
        "http://[2002:7f00:1::]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
        "http://[::]/",
        "file:///etc/passwd",
        "http://user:pw@example.com/",
    ],
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


def test_embedded_public_ipv4_is_judged_as_that_ipv4():
    # NAT64 and 6to4 of a public IPv4 reach a public host: accepted.
    assert resolve_target("http://[64:ff9b::5db8:d70e]/", []).address == "64:ff9b::5db8:d70e"
    assert resolve_target("http://[2002:5db8:d70e::1]/", []).address == "2002:5db8:d70e::1"
    # The allow-list applies to the IPv4 inside as well.
    assert resolve_target("http://[64:ff9b::7f00:1]/", ["127.0.0.0/8"]).address == "64:ff9b::7f00:1"


def test_refusal_names_the_setting_that_would_allow_it():
    with pytest.raises(YanaError) as exc:
        resolve_target("http://224.0.0.1/", [])
    assert "WEBHOOK_ALLOW" in exc.value.message
    with pytest.raises(YanaError) as exc:
        check_url("http://[64:ff9b::7f00:1]/label.png", [])
    assert exc.value.code == "URL_NOT_ALLOWED"
    assert "FETCH_ALLOW" in exc.value.message and "WEBHOOK_ALLOW" not in exc.value.message


def test_public_address_accepted_without_allow_list():
    t = resolve_target("https://93.184.215.14/hook", [])
    assert t.address == "93.184.215.14" and t.port == 443


def test_signature_verifies_with_standard_webhooks():
    secret = Settings().webhook_secret
    ts = datetime.now(UTC).replace(microsecond=0)
    sig = sign(secret, "msg_1", ts, '{"a":1}')
    assert sig.startswith("v1,")
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(ts.timestamp())), "webhook-signature": sig}
    assert Webhook(secret).verify('{"a":1}', headers) == {"a": 1}


def test_default_schedule_spans_more_than_a_day():
    s = Settings()
    assert schedule_span_s(s.webhook_max_attempts, s.webhook_backoff_base_s, s.webhook_backoff_max_s) >= 24 * 3600
    assert backoff_s(1, 5, 100) == 5 and backoff_s(2, 5, 100) == 10 and backoff_s(10, 5, 100) == 100
