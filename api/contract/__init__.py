"""The HTTP contract every route follows (seed 000). Installed once by api.main.create_app."""

from fastapi import FastAPI

from api.contract.errors import install_error_handlers
from api.contract.correlation import CorrelationMiddleware


def install_contract(app: FastAPI) -> None:
    install_error_handlers(app)
    app.add_middleware(CorrelationMiddleware)
