"""`python -m api.uvicorn_server --host H --port P [--workers N]`: uvicorn serving api.main:app with the
server's own 400s in the contract's error body (api.contract.http_server). What `yana api` and
`yana up` run; `python -m uvicorn api.main:app` still works, with uvicorn's plain-text 400s."""

from __future__ import annotations

import argparse

import uvicorn

from api.contract.http_server import protocol_path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="api.uvicorn_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout-graceful-shutdown", type=int, default=5)
    a = p.parse_args(argv)
    uvicorn.run(
        "api.main:app",
        host=a.host,
        port=a.port,
        workers=a.workers,
        access_log=False,
        timeout_graceful_shutdown=a.timeout_graceful_shutdown,
        http=protocol_path(),
    )


if __name__ == "__main__":
    main()
