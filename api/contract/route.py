"""Where a route's own contract is enforced: in the route, once FastAPI has routed the request to it
and before FastAPI reads the body.

`ContractRoute` is the route class of every router (`APIRouter(route_class=ContractRoute)`). Its
`handle`, the ASGI entry FastAPI calls on the matched route (for a wrong method too, before its
405), runs the checks of api.contract.gate under the route's own policy, then the route.

ASGI-level rather than a wrapped `get_route_handler`: the body cap counts bytes as they stream,
a 405 is still answered under the route's auth, and idempotency and the time limit wrap the whole
response (including a replay that never reaches FastAPI).

What FastAPI and its add-ons put on the app itself (/openapi.json, the offline /docs and /redoc
with their static files) is not a ContractRoute: `GuardedRoute` wraps each with the same checks
under its own (default) policy, and `UnroutedRequests` does so for a request no route takes (404,
a trailing-slash redirect), so nothing is answered to a caller without a token.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.datastructures import URL
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Match, Mount, Route, WebSocketRoute, get_route_path
from starlette.types import ASGIApp, Receive, Scope, Send

from api.contract.gate import Admitted, RouteGate


class ContractRoute(APIRoute):
    """An APIRoute that enforces its own contract (the policy its `contract(...)` declares, merged
    with the defaults and ROUTE_POLICIES) before FastAPI reads the request."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().handle(scope, receive, send)
            return
        gate = RouteGate.of(scope)
        rp = gate.policies.of_route(self)
        await self.respond(gate, scope, send, await gate.admit(scope, receive, rp))

    async def respond(self, gate: RouteGate, scope: Scope, send: Send, req: Admitted) -> None:
        """The admitted request's answer (api.contract.mcp.McpRoute answers in JSON-RPC's terms)."""
        await gate.respond(scope, send, req, partial(APIRoute.handle, self))


class GuardedRoute(BaseRoute):
    """A route of the app that is not a ContractRoute (FastAPI's /openapi.json, the offline docs
    and their static files), checked as one under its own policy: closed without a token."""

    def __init__(self, route: BaseRoute, gate: RouteGate):
        self.route = route
        self.gate = gate

    def __getattr__(self, name: str) -> Any:  # path, name, methods...: the wrapped route's
        if name == "route":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.route, name)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return self.route.matches(scope)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        return self.route.url_path_for(name, **path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.route.handle(scope, receive, send)
            return
        rp = self.gate.policies.of_route(self)
        await self.gate.respond(scope, send, await self.gate.admit(scope, receive, rp), self.route.handle)


class UnroutedRequests:
    """The router's answer to a request no route takes (404, or the redirect to the same path
    with or without its trailing slash), given only after the default policy admits it: an
    unknown path tells a caller without a token nothing. The router's own slash redirect is
    turned off for this, since it answers before its default does."""

    def __init__(self, app: FastAPI, gate: RouteGate):
        self.router = app.router
        self.gate = gate
        self.not_found: ASGIApp = app.router.default
        self.redirect_slashes = app.router.redirect_slashes
        app.router.redirect_slashes = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.not_found(scope, receive, send)
            return
        rp = self.gate.policies.unrouted
        await self.gate.respond(scope, send, await self.gate.admit(scope, receive, rp), self.answer)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        redirect = self.slash_redirect(scope)
        if redirect is not None:
            await RedirectResponse(url=redirect)(scope, receive, send)
            return
        await self.not_found(scope, receive, send)

    def slash_redirect(self, scope: Scope) -> str | None:
        """Starlette's redirect_slashes: the URL with the trailing slash added or removed, when a
        route takes that."""
        route_path = get_route_path(scope)
        if not self.redirect_slashes or route_path == "/":
            return None
        redirect_scope = dict(scope)
        if route_path.endswith("/"):
            redirect_scope["path"] = redirect_scope["path"].rstrip("/")
        else:
            redirect_scope["path"] = redirect_scope["path"] + "/"
        for route in self.router.routes:
            match, _ = route.matches(redirect_scope)
            if match != Match.NONE:
                return str(URL(scope=redirect_scope))
        return None


def guard_routes(app: FastAPI, gate: RouteGate) -> None:
    """Wrap the routes FastAPI and its add-ons put on the app itself in GuardedRoute; refuse any
    other route that is not a ContractRoute (a router declared without the route class, included
    with FastAPI's own include_router), which would otherwise be served without the contract.
    Websockets are the middleware's (closed without a token). Run at install and at startup."""
    routes = app.router.routes
    for i, route in enumerate(routes):
        if isinstance(route, (Route, Mount)) and not isinstance(route, ContractRoute):
            routes[i] = GuardedRoute(route, gate)
    unguarded = [
        rc.path_format or rc.path
        for rc in iter_route_contexts(routes)
        if not isinstance(rc.original_route, (ContractRoute, GuardedRoute, WebSocketRoute))
    ]
    if unguarded:
        raise RuntimeError(
            f"routes without the contract: {unguarded}; declare their router with route_class=ContractRoute"
        )
