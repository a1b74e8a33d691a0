"""Which route a request will reach, found before the app runs (for per-route policies).

FastAPI routes the request itself later; this mirrors its matching over the flattened route list
(fastapi.routing.iter_route_contexts), so a route added after install_contract (e.g. /mcp) is
covered too: the index is rebuilt whenever a request matches nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import Match
from starlette.types import Scope

from api.contract.policy import ResolvedPolicy, resolve
from yana.settings import Settings


class RouteIndex:
    def __init__(self, app: FastAPI, settings: Settings):
        self.app = app
        self.settings = settings
        self._routes: list[Any] = []
        self._policies: dict[int, ResolvedPolicy] = {}
        self._default = resolve(None, settings)

    def rebuild(self) -> None:
        self._routes = list(iter_route_contexts(self.app.routes))
        self._policies = {id(rc): resolve(rc, self.settings) for rc in self._routes}

    def routes(self) -> list[Any]:
        if not self._routes:
            self.rebuild()
        return self._routes

    def policy_of(self, route_ctx: Any) -> ResolvedPolicy:
        return self._policies.get(id(route_ctx)) or resolve(route_ctx, self.settings)

    def match(self, scope: Scope) -> tuple[Any | None, ResolvedPolicy]:
        """(route context or None, its policy). A path that exists with another method resolves
        to that route's policy too (FastAPI answers 405 there)."""
        found = self._match(scope)
        if found is None:
            self.rebuild()
            found = self._match(scope)
        if found is None:
            return None, self._default
        return found, self.policy_of(found)

    def _match(self, scope: Scope) -> Any | None:
        partial = None
        for rc in self.routes():
            try:
                m, _ = rc.matches(scope)
            except ValueError:  # a convertor rejects a path value with ValueError: no match
                continue
            if m is Match.FULL:
                return rc
            if m is Match.PARTIAL and partial is None:
                partial = rc
        return partial
