"""Every feature's router, in one list that api.main includes."""

import importlib

_MODULES = ["health", "jobs", "demo", "ingest", "reembed", "search", "chat", "memo", "retrieve"]

ROUTERS = []
for _name in _MODULES:
    try:
        _mod = importlib.import_module(f"api.routes.{_name}")
    except ModuleNotFoundError as _exc:  # a feature not built yet
        if _exc.name != f"api.routes.{_name}":
            raise
        continue
    ROUTERS.append(_mod.router)
