"""/docs and /redoc work without the internet: every asset the pages load is served by the API."""

from __future__ import annotations

import re

import pytest

from tests.api.contract_support import contract_server

_ASSET = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_page_loads_only_local_assets_that_answer(redis_url, page):
    with contract_server(with_probes=False, REDIS_URL=redis_url) as c:
        r = c.get(page)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assets = [a or b for a, b in _ASSET.findall(r.text)]
        assert any(a.endswith(".js") for a in assets) and any("openapi.json" in a for a in assets), assets
        for url in assets:
            assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
            got = c.get(url)
            assert got.status_code == 200 and got.content, url
