"""Dependencies every route shares, as `Annotated` aliases: FastAPI documents them by itself (the
bearer security scheme, the correlation request headers) and runs them per request.

By the time these run, the route (api.contract.route.ContractRoute) has already checked the token,
before the rate limit and before the body was read, and the contract middleware has rewritten the
correlation headers to valid values. The token dependency is what documents the security scheme;
it checks the token again (one comparison) so that an operation stays closed even if it were ever
called some other way.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

bearer_scheme = HTTPBearer(
    scheme_name="bearerAuth",
    description="AUTH_TOKENS; required on every operation but health and version when AUTH_ENABLED",
    auto_error=False,
)


async def caller_token(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]
) -> str | None:
    """The caller's bearer token when auth is on (401 when missing or wrong); None when off."""
    auth = getattr(request.app.state, "auth", None)
    if auth is None:
        from api.contract.auth import BearerAuth
        from yana.settings import get_settings

        auth = request.app.state.auth = BearerAuth(get_settings())
    return auth.authenticate(request.headers.get("authorization"))


BearerToken = Annotated[str | None, Security(caller_token)]


async def correlation_headers(
    x_run_id: Annotated[
        str | None,
        Header(
            alias="X-Run-Id",
            max_length=512,
            description="Run id to correlate logs and jobs (1-128 of A-Z a-z 0-9 . _ : -; generated when absent "
            "or invalid)",
        ),
    ] = None,
    x_trace_id: Annotated[
        str | None,
        Header(
            alias="X-Trace-Id",
            max_length=512,
            description="Trace id (same characters; defaults to the traceparent trace-id)",
        ),
    ] = None,
    traceparent: Annotated[
        str | None,
        Header(max_length=512, description="W3C Trace Context traceparent (an invalid one starts a new trace)"),
    ] = None,
    tracestate: Annotated[str | None, Header(description="W3C Trace Context tracestate (dropped when invalid)")] = None,
) -> None:
    """Documents the correlation headers. The contract middleware has already replaced invalid
    ids and traceparents by valid ones (at most 128 characters), so the bounds never refuse."""


Correlated = Annotated[None, Depends(correlation_headers)]

# Dependencies of every router: protected ones add the bearer token.
CORRELATED = [Depends(correlation_headers)]
AUTHENTICATED = [Security(caller_token), *CORRELATED]
