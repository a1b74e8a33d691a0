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


def test_celery_sockets_time_out_and_kombu_takes_every_option():
    """A broker connection without a socket timeout can wait forever on a master that died in a
    failover (kombu's documentation of socket_timeout); the sentinels get the same bound. Every
    option must be one kombu's channel reads, or it is silently ignored."""
    from kombu.transport.redis import Channel, SentinelChannel

    from yana.clients import celery_transport_options

    opts = celery_transport_options("sentinel://a:26379,b:26380/mymaster/0", 3.0)
    assert opts["socket_timeout"] == opts["socket_connect_timeout"] == 3.0
    assert opts["sentinel_kwargs"] == {"socket_timeout": 3.0, "socket_connect_timeout": 3.0}
    assert opts["master_name"] == "mymaster"
    assert set(opts) <= set(SentinelChannel.from_transport_options)
    plain = celery_transport_options("redis://h:1/0", 5.0)
    assert plain["socket_timeout"] == 5.0 and "sentinel_kwargs" not in plain and "master_name" not in plain
    assert set(plain) <= set(Channel.from_transport_options)
