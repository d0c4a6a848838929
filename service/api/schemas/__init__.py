"""The API's wire types: request bodies, answers and problems (msgspec Structs)."""

from __future__ import annotations

from service.api.schemas._catalogue import InstanceView, ModelEntry, ModelList, ModelStatusView, ProgressView
from service.api.schemas._common import (
    MAX_NAME_LENGTH,
    PROBLEM_JSON,
    ErrorObject,
    FieldError,
    ModelName,
    ModelParam,
    ProblemDetails,
    problems,
)
from service.api.schemas._control import (
    DownloadAnswer,
    FileView,
    JobList,
    JobView,
    LoadAnswer,
    ModelCommand,
    RemoveAnswer,
    UnloadAnswer,
)
from service.api.schemas._history import DownloadHistory, LoadHistory, ModelHistoryView
from service.api.schemas._openai import (
    ApplyTemplateRequest,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    InfillRequest,
    LlamaEmbeddingRequest,
    ModelRequest,
    RerankRequest,
    TokenizeRequest,
)
from service.api.schemas._service import EventPage, EventView, GenerationSettings, HealthView, RouterProps, TailView

__all__ = [
    "MAX_NAME_LENGTH",
    "PROBLEM_JSON",
    "ApplyTemplateRequest",
    "ChatRequest",
    "CompletionRequest",
    "DetokenizeRequest",
    "DownloadAnswer",
    "DownloadHistory",
    "EmbeddingRequest",
    "ErrorObject",
    "EventPage",
    "EventView",
    "FieldError",
    "FileView",
    "GenerationSettings",
    "HealthView",
    "InfillRequest",
    "InstanceView",
    "JobList",
    "JobView",
    "LlamaEmbeddingRequest",
    "LoadAnswer",
    "LoadHistory",
    "ModelCommand",
    "ModelEntry",
    "ModelHistoryView",
    "ModelList",
    "ModelName",
    "ModelParam",
    "ModelRequest",
    "ModelStatusView",
    "ProblemDetails",
    "ProgressView",
    "RemoveAnswer",
    "RerankRequest",
    "RouterProps",
    "TailView",
    "TokenizeRequest",
    "UnloadAnswer",
    "problems",
]
