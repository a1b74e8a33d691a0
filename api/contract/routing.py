"""The merged policy of every route of an app, read from FastAPI's own route contexts
(fastapi.routing.iter_route_contexts: a route as included, with its router's prefix).

Per app, since ROUTE_POLICIES and the defaults are the app's settings, while a router (and so its
route objects) may be included in more than one app. The route that FastAPI matched asks for its
policy here (api.contract.route); the OpenAPI document shows it (api.contract.openapi).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from api.contract.policy import ResolvedPolicy, resolve
from yana.settings import Settings


class RouteIndex:
    def __init__(self, app: FastAPI, settings: Settings):
        self.app = app
        self.settings = settings
        self._routes: list[Any] = []
        self._policies: dict[int, ResolvedPolicy] = {}
        self._by_route: dict[int, tuple[Any, ResolvedPolicy]] = {}
        self.unrouted = resolve(None, settings)  # a request no route takes

    def rebuild(self) -> None:
        self._routes = list(iter_route_contexts(self.app.routes))
        self._policies = {id(rc): resolve(rc, self.settings) for rc in self._routes}
        # Routes are unhashable (they compare by value): keyed by identity, the route kept to check it.
        self._by_route = {id(rc.original_route): (rc.original_route, self._policies[id(rc)]) for rc in self._routes}

    def routes(self) -> list[Any]:
        if not self._routes:
            self.rebuild()
        return self._routes

    def policy_of(self, route_ctx: Any) -> ResolvedPolicy:
        return self._policies.get(id(route_ctx)) or resolve(route_ctx, self.settings)

    def of_route(self, route: Any) -> ResolvedPolicy:
        """The policy of a route of this app, as it was included (the index is rebuilt when it
        does not know the route: one added since)."""
        found = self._by_route.get(id(route))
        if found is None or found[0] is not route:
            self.rebuild()
            found = self._by_route.get(id(route))
        if found is None or found[0] is not route:  # not among the app's routes: as it stands
            return resolve(route, self.settings)
        return found[1]
