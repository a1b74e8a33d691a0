"""Today's chat turn log, read-only (opt-in with LOGS_RESOURCE_ENABLED): what `yana mcp --logs`
offers as the MCP resource `logs/today`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
from fastapi import APIRouter, Query

from api.contract import ContractRoute
from api.schemas import ERRORS, Envelope
from pipelines.chat.turnlog import TurnLog
from yana.errors import ErrorCode, YanaError
from yana.settings import get_settings

router = APIRouter(tags=["logs"], route_class=ContractRoute)


class LogsToday(Envelope):
    date: str
    records: list[dict]


def _read_tail(limit: int) -> dict:
    s = get_settings()
    if not s.logs_resource_enabled:
        raise YanaError.of(ErrorCode.NOT_FOUND, "the logs/today resource is off (LOGS_RESOURCE_ENABLED)")
    path = TurnLog(s.chat_log_dir or s.data_dir / "logs").path_for()
    records: list[dict] = []
    if path is not None and path.is_file():
        for line in path.read_bytes().splitlines()[-limit:]:
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:  # a line cut by a crash mid-write
                continue
    return {"date": path.stem.removeprefix("chat-") if path else "", "records": records}


@router.get(
    "/v1/logs/today",
    operation_id="logs_today",
    response_model=LogsToday,
    responses=ERRORS(404),
    summary="Today's chat turns (personal data masked), newest last; off unless LOGS_RESOURCE_ENABLED",
)
async def logs_today(
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many of the latest turns")] = 200,
) -> dict:
    return await asyncio.to_thread(_read_tail, limit)
