"""/v1/chat: one turn of speaker A, answered inside the chat budget.

Accepts JSON, or the same fields form-encoded (the seed keeps form compatibility: `filters` / `context`
as JSON strings or as flat fields). The legacy `POST /chat` form endpoint (user_text, use_rag
"true"/"false", top_k, category, region) answers the same JSON.

The budget is min(CHAT_TIMEOUT_MS, the request's `timeout_ms`), counted from when the route starts
reading the body; the chat graph answers with a fallback inside it. The contract's 408 limit for the
route (CHAT_TIMEOUT_MS + 1 s, declared with contract(...) on the routes) is only the backstop.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Form, Request, params
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from api.contract.policy import FORM_TYPES, JSON_TYPES, contract
from api.contract.route import ContractRoute
from api.schemas import ERRORS, Envelope
from pipelines.chat import ChatInput, default_deps, default_turn_log, run_chat
from pipelines.labels.model import LabelCard
from pipelines.text.check import is_blank
from yana import context as correlation
from yana.errors import bad_request
from yana.settings import get_settings

_STARTED = "yana.chat.started"


class ChatFilters(BaseModel):
    # Published without extra properties (tool and client generators), yet an unknown key from
    # an older talk-app client is ignored rather than refused.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})
    category: str | None = Field(None, max_length=64, description="sake | juice | ...")
    region: str | None = Field(None, max_length=64)
    brewery: str | None = Field(None, max_length=128)


class ChatContext(BaseModel):
    """What the talk app knows about the turn. Unknown extra keys are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    turn: StrictInt | None = Field(None, ge=0, le=1_000_000)
    topic: str | None = Field(None, max_length=200)
    run_id: str | None = Field(
        None,
        max_length=128,
        validation_alias=AliasChoices("run_id", "runId"),
        description="the talk app's run id (logged with the turn); runId is accepted too",
    )
    session_id: str | None = Field(
        None,
        validation_alias=AliasChoices("session_id", "sessionId"),
        pattern=r"^[A-Za-z0-9._:\-]{1,128}$",
        description="turns with the same session_id continue one conversation (kept in Redis with a TTL); "
        "sessionId is accepted too",
    )
    disable_sayana: bool = Field(False, description="true: no 「せやなー」/「せやせや」 in the reply")


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    user_text: str = Field(..., min_length=1, max_length=4000)
    use_rag: bool = True
    top_k: StrictInt = Field(5, ge=1, le=10)
    filters: ChatFilters | None = None
    context: ChatContext | None = None
    timeout_ms: StrictInt | None = Field(
        None,
        ge=100,
        le=120_000,
        description="the caller's own ceiling in ms; the budget is the smaller of this and CHAT_TIMEOUT_MS",
    )

    @field_validator("user_text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if is_blank(v):
            raise ValueError("user_text must not be blank")
        return v


class ChatHit(LabelCard):
    """A label the reply is grounded on: the talk app's schema, the card's fields only."""

    model_config = ConfigDict(extra="ignore")


class ChatResponse(Envelope):
    reply: str
    hits: list[ChatHit]
    llm: Literal["on", "off"]
    elapsed_ms: int
    rag_hit_count: int
    run_id: str | None = None
    trace_id: str | None = None
    warnings: list[str]


# --- form compatibility ---------------------------------------------------------------------------

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_FILTER_KEYS = ("category", "region", "brewery")
_CONTEXT_KEYS = ("turn", "topic", "run_id", "session_id", "disable_sayana")


def utf8_repair(value: str | None) -> str | None:
    """Starlette reads a urlencoded body as latin-1; raw UTF-8 bytes (curl -d 'user_text=小樽')
    then arrive as mojibake. Percent-encoded text is already proper Unicode and is left alone."""
    if not value or value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def _bool(value: str) -> Any:
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else value


def _int(value: str) -> Any:
    try:
        return int(value.strip())
    except ValueError:
        return value  # left for validation to reject with a 400


def _json_field(name: str, value: str) -> dict:
    try:
        parsed = orjson.loads(value) if value.strip() else {}
    except orjson.JSONDecodeError:
        raise bad_request(f"{name}: form field must be a JSON object") from None
    if not isinstance(parsed, dict):
        raise bad_request(f"{name}: form field must be a JSON object")
    return parsed


def form_to_request(form: Any) -> dict:
    """The form fields as the JSON request: filters/context as JSON strings or as flat fields."""

    def get(key: str) -> str | None:
        value = form.get(key)
        return utf8_repair(value) if isinstance(value, str) else None  # files are ignored

    data: dict[str, Any] = {}
    if get("user_text") is not None:
        data["user_text"] = get("user_text")
    if get("use_rag") is not None:
        data["use_rag"] = _bool(get("use_rag"))
    for key in ("top_k", "timeout_ms"):
        if get(key) is not None and get(key).strip():
            data[key] = _int(get(key))
    filters = _json_field("filters", get("filters")) if get("filters") is not None else {}
    for key in _FILTER_KEYS:
        if get(key) is not None:
            filters[key] = get(key)
    if filters:
        data["filters"] = filters
    ctx = _json_field("context", get("context")) if get("context") is not None else {}
    for key in _CONTEXT_KEYS:
        if get(key) is not None:
            ctx[key] = {"turn": _int, "disable_sayana": _bool}.get(key, str)(get(key))
    if ctx:
        data["context"] = ctx
    return data


class ChatRoute(ContractRoute):
    """Notes when the request arrived (the budget counts from there) and turns a form body into the
    JSON body, so both kinds reach the same validation and handler."""

    def get_route_handler(self):
        handler = super().get_route_handler()
        # Routes declared with Form() fields (the legacy /chat) take the form as it is.
        form_route = self.body_field is not None and isinstance(self.body_field.field_info, (params.Form, params.File))

        async def handle(request: Request):
            request.scope[_STARTED] = time.monotonic()
            ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype in FORM_TYPES and not form_route:
                data = form_to_request(await request.form())
                body = orjson.dumps(data)
                headers = [(k, v) for k, v in request.scope["headers"] if k not in (b"content-type", b"content-length")]
                headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                sent = False

                async def receive():
                    nonlocal sent
                    if sent:
                        return {"type": "http.disconnect"}
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}

                request = Request({**request.scope, "headers": headers}, receive)
            return await handler(request)

        return handle


def _form_schema() -> dict:
    """OpenAPI for the form-encoded body (flat fields; filters / context may also be JSON strings)."""
    s = {"type": "string"}
    props = {
        "user_text": {"type": "string", "minLength": 1, "maxLength": 4000},
        "use_rag": {"type": "boolean", "default": True},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
        "timeout_ms": {"type": "integer", "minimum": 100, "maximum": 120000},
        "filters": {"type": "string", "description": "JSON object {category, region, brewery}"},
        "context": {"type": "string", "description": "JSON object {turn, topic, run_id, session_id, disable_sayana}"},
        "category": s,
        "region": s,
        "brewery": s,
        "turn": {"type": "integer", "minimum": 0},
        "topic": s,
        "run_id": s,
        "session_id": {"type": "string", "pattern": r"^[A-Za-z0-9._:\-]{1,128}$"},
        "disable_sayana": {"type": "boolean"},
    }
    return {"schema": {"type": "object", "required": ["user_text"], "properties": props}}


router = APIRouter(tags=["chat"], route_class=ChatRoute)

_JSON_OR_FORM = JSON_TYPES + FORM_TYPES


async def _answer(request: Request, body: ChatRequest) -> dict:
    settings = get_settings()
    started = request.scope.get(_STARTED) or time.monotonic()
    ctx = body.context.model_dump() if body.context else {}
    out = await run_chat(
        ChatInput(
            user_text=body.user_text,
            use_rag=body.use_rag,
            top_k=body.top_k,
            filters=body.filters.model_dump(exclude_none=True) if body.filters else {},
            context=ctx,
            timeout_ms=body.timeout_ms,
        ),
        default_deps(settings),
        started=started,
        turn_log=default_turn_log(settings),
    )
    return {
        "reply": out.reply,
        "hits": [{k: h.get(k) for k in ChatHit.model_fields} for h in out.hits],
        "llm": out.llm,
        "elapsed_ms": int((time.monotonic() - started) * 1000),
        "rag_hit_count": out.rag_hit_count,
        "warnings": out.warnings,
        **correlation.body_ids(),
    }


@router.post(
    "/v1/chat",
    operation_id="chat",
    response_model=ChatResponse,
    responses=ERRORS(408, 413, 415),
    summary="One chat turn of speaker A (persona policy, RAG, LLM inside a deadline)",
    openapi_extra={
        **contract(media_types=_JSON_OR_FORM, timeout_ms_setting="chat_timeout_ms", timeout_grace_s=1.0),
        "requestBody": {"content": {ct: _form_schema() for ct in FORM_TYPES}},
    },
)
async def chat(request: Request, body: ChatRequest) -> dict:
    return await _answer(request, body)


@router.post(
    "/chat",
    operation_id="chat_legacy",
    response_model=ChatResponse,
    responses=ERRORS(408, 413, 415),
    summary="Legacy form endpoint of chat (same answer as /v1/chat)",
    openapi_extra=contract(timeout_ms_setting="chat_timeout_ms", timeout_grace_s=1.0),
)
async def chat_legacy(
    request: Request,
    user_text: Annotated[str, Form(min_length=1, max_length=4000)],
    use_rag: Annotated[bool, Form()] = True,
    top_k: Annotated[int, Form(ge=1, le=10)] = 5,
    category: Annotated[str | None, Form(max_length=64)] = None,
    region: Annotated[str | None, Form(max_length=64)] = None,
) -> dict:
    try:
        body = ChatRequest(
            user_text=utf8_repair(user_text),
            use_rag=use_rag,
            top_k=top_k,
            filters=ChatFilters(category=utf8_repair(category) or None, region=utf8_repair(region) or None),
        )
    except ValidationError as exc:
        raise bad_request(exc.errors()[0].get("msg", "invalid request")) from None
    return await _answer(request, body)
