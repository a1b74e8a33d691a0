"""I/O of the think step and the think job (pydantic): one schema, published in OpenAPI by the routes.

Shapes follow seed 004 §4: the request carries everything (question, subject, search history, the
signed state of the previous step, constraints); the answer is exactly one action plus the state to
send back next time.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ERROR_TYPES = ("LOOP_LIMIT", "TIMEOUT", "INVALID_INPUT", "MODEL_FAILURE", "OTHER")
QUERY_MAX_CHARS = 1000


def new_request_id() -> str:
    """A request id for a caller that sent none (echoed in every step and in the job's result)."""
    return f"req-{uuid.uuid4().hex[:16]}"


class Constraints(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_loops: int = Field(3, ge=1, le=10, description="search rounds at most; capped by THINK_MAX_LOOPS (3)")
    max_evidence: int = Field(8, ge=1, le=50, description="evidence items at most in COMPLETE")
    latency_budget_ms: int | None = Field(
        None,
        ge=50,
        le=600_000,
        description="time for this step (the job: the whole loop); default 8 000, capped at 30 000",
    )


class SearchResult(BaseModel):
    """One hit as /v1/search returns it; only `id` is required (other search backends may send less)."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(..., min_length=1, max_length=500)
    score: float | None = None
    category: str = ""
    brand_name: str = ""
    product_name: str = ""
    brewery: str = ""
    region: str = ""
    label_features: list[str] | str = Field(default_factory=list)
    text: str = Field("", max_length=20_000, description="the Markdown snippet of the hit")
    page: int | None = None
    phash: str = ""


class HistoryEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    queries: list[Any] = Field(default_factory=list, description="what was searched (strings or objects)")
    results: list[SearchResult] = Field(default_factory=list, max_length=500)
    evaluation: Any = None


class ThinkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(
        default_factory=new_request_id,
        min_length=1,
        max_length=128,
        description="tracing id, echoed and logged; generated (req-<hex>) when absent, like a trace id",
    )
    user_query: str = Field(..., min_length=1, max_length=QUERY_MAX_CHARS)
    subject_id: str = Field(
        "",
        max_length=200,
        description="hard filter: a category (sake | juice) narrows every search; other values are context only",
    )
    search_history: list[HistoryEntry] = Field(default_factory=list, max_length=20)
    state: str | None = Field(None, max_length=20_000, description="the `state` the previous step returned, as is")
    constraints: Constraints = Field(default_factory=lambda: Constraints.model_validate({}))


class PlannedSearch(BaseModel):
    aspect: str = Field(description="the aspect id this search is for")
    query_text: str
    query_vector: str
    filters: dict[str, list[str]] = Field(default_factory=dict)
    k: int = 5


class Evidence(BaseModel):
    document_id: str
    pages: list[int] = Field(default_factory=list)
    snippets: list[str] = Field(default_factory=list)
    score: float | None = None
    why_relevant: str
    aspects: list[str] = Field(default_factory=list, description="aspect ids this item covers")


class SearchAction(BaseModel):
    action: Literal["SEARCH"] = "SEARCH"
    queries_text: list[str]
    queries_vector: list[str]
    filters_hint: dict[str, Any]
    rationale: str
    searches: list[PlannedSearch] = Field(description="the same queries, one per aspect, with their own filters")


class CompleteAction(BaseModel):
    action: Literal["COMPLETE"] = "COMPLETE"
    evidence: list[Evidence]
    coverage_notes: str
    covered: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)


class ErrorAction(BaseModel):
    action: Literal["ERROR"] = "ERROR"
    error_type: Literal["LOOP_LIMIT", "TIMEOUT", "INVALID_INPUT", "MODEL_FAILURE", "OTHER"]
    message: str


class Aspect(BaseModel):
    id: str
    label: str = Field(description="what the aspect asks for, in words")
    brand_name: str = ""
    brewery: str = ""
    region: str = ""
    category: str = ""
    features: list[str] = Field(default_factory=list)
    grade: str = ""
    regions: list[str] = Field(
        default_factory=list, description="the label regions the place covers (any of them): 島根 → 松江, 九州 → 福岡 …"
    )
    near_regions: list[str] = Field(default_factory=list, description="label regions nearby (same area): alternatives")
    near_category: str = Field("", description="for a category no label has (焼酎): the one to offer instead")
    prefer: list[str] = Field(
        default_factory=list, description="preferences (said loosely, hedged, or suggested by the context): rank only"
    )
    context: list[str] = Field(default_factory=list, description="words no label shows (occasion, food, hedges)")
    one_of: str = Field("", description="aspects sharing a group id are alternatives (A か B): any one satisfies")


class StepInfo(BaseModel):
    """What every step answer carries besides its action."""

    model_config = ConfigDict(extra="allow")  # the HTTP envelope (server_version, run_id...) rides along

    request_id: str
    round: int = Field(description="search rounds done before this step")
    max_loops: int
    aspects: list[Aspect] = Field(default_factory=list, description="the question's aspects, as planned")
    planner: Literal["deterministic", "llm"] = "deterministic"
    evaluator: Literal["deterministic", "llm"] = "deterministic"
    warnings: list[str] = Field(default_factory=list)
    elapsed_ms: int = 0
    state: str = Field(description="send back as `state` on the next step, as is (signed; an edited one is refused)")
    run_id: str | None = None
    trace_id: str | None = None


class SearchStep(SearchAction, StepInfo):
    pass


class CompleteStep(CompleteAction, StepInfo):
    pass


class ErrorStep(ErrorAction, StepInfo):
    pass


ThinkResponse = Annotated[SearchStep | CompleteStep | ErrorStep, Field(discriminator="action")]
