"""The web console at /console: static HTML/CSS/JS (no build step, no CDN) that calls the public
HTTP API with the bearer token the person typed in (kept in sessionStorage). This package only
serves files: the pages hold no logic of their own beyond calling the API."""

from api.console.routes import router

__all__ = ["router"]
