"""REDIS_URL forms the one client factory understands, and what Celery is given for them."""

from __future__ import annotations

import pytest

from yana.clients import SentinelTarget, celery_redis_config, parse_sentinel


def test_plain_urls_are_not_sentinel():
    assert parse_sentinel("redis://127.0.0.1:6379/0") is None
    assert celery_redis_config("redis://h:1/2") == ("redis://h:1/2", {})


def test_sentinel_url():
    t = parse_sentinel("sentinel://:s3cret@a:26379,b:26380/mymaster/3")
    assert t == SentinelTarget((("a", 26379), ("b", 26380)), "mymaster", 3, "s3cret")
    assert parse_sentinel("sentinel://a/m") == SentinelTarget((("a", 26379),), "m", 0, None)
    url, opts = celery_redis_config("sentinel://:s3cret@a:26379,b:26380/mymaster/3")
    assert url == "sentinel://:s3cret@a:26379/3;sentinel://:s3cret@b:26380/3"
    assert opts == {"master_name": "mymaster"}


def test_sentinel_url_needs_a_master_name():
    with pytest.raises(ValueError):
        parse_sentinel("sentinel://a:26379")
