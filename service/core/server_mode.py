"""Router or single-model mode, as llama-server decides it, and the model each request goes to.

llama-server runs one model when its command line names one (``-m FILE``,
``-hf user/repo`` of a repo without ``preset.ini``; ``server.cpp``:
``is_router_server`` is "no model path, no hf repo"), and then serves that
model and nothing else: a request without ``model``, or naming any model
(``gpt-3.5-turbo`` from an OpenAI client), goes to it, ``GET /v1/models`` lists
it alone and ``/props``, ``/slots`` and ``/metrics`` are its own. Otherwise it
is a router, and every request must name its model (400 "model name is
missing from the request", ``router_validate_model`` in ``server-models.cpp``).

Two moments decide: :func:`may_be_single` from the command line alone, before
anything runs (the request schemas are built then, and may omit ``model``
only if single-model mode is possible), and :func:`decide_mode` once ``-hf``
was resolved (a repo holding ``preset.ini`` makes a router after all).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.core.errors import CommandRejected
from service.core.state import ModelStatus, RouterState

MISSING_MODEL = "model name is missing from the request"
"""llama.cpp router's message, word for word (clients match on it)."""
FAKE_TIMING_WARNING = (
    "LLAMA_SERVER_DEBUG_FAKE_TIMING is set: each load waits 2 s and each request holds its model 2 s "
    "before it is sent (llama.cpp's debug switch for its router's scheduling tests)"
)
"""``/health``'s warning while the switch slows the router down (never in single-model mode)."""
LOADING = "Loading model"
"""llama-server's 503 on ``/health`` (``unavailable_error``) until its model is loaded."""
_NOT_SERVING = frozenset({ModelStatus.DOWNLOADING, ModelStatus.LOADING, ModelStatus.FAILED, ModelStatus.ABSENT})


@dataclass(frozen=True, slots=True)
class ServerMode:
    """Which mode the service runs in: ``single_model`` names the one model of single-model mode,
    ``aliases`` its ``--alias`` names as llama-server keeps them (a ``std::set``: unique, sorted)."""

    single_model: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def single(self) -> bool:
        """Whether this is llama-server's single-model mode."""
        return self.single_model is not None

    @property
    def model_id(self) -> str | None:
        """The single model's id, llama-server's ``model_name``: the first of its aliases (``--alias
        b,a`` is ``a``: "backward compat: use first alias as model name", ``server-context.cpp``),
        else its name; None in router mode."""
        return self.aliases[0] if self.single_model is not None and self.aliases else self.single_model


ROUTER = ServerMode()
"""Router mode: requests name their model."""


def may_be_single(*, model_file: bool, hf_repo: bool) -> bool:
    """Whether the command line may make a single model (``-m`` or ``-hf``): decided before the
    ``-hf`` repo is looked at, so the request schemas can be built; :func:`decide_mode` has the last word."""
    return model_file or hf_repo


def decide_mode(single_model: str | None, aliases: Sequence[str] = ()) -> ServerMode:
    """The mode once ``-hf``/``-m`` resolved: the model they name (``None`` for none, or for an
    ``-hf`` repo holding ``preset.ini``, which runs as the router's preset) and its ``--alias`` names."""
    return ServerMode(single_model, tuple(sorted(set(aliases)))) if single_model else ROUTER


def served_name(mode: ServerMode, name: str) -> str:
    """The name model ``name`` answers under: its id in ``GET /v1/models``, the ``model`` of its
    answers, ``/props``'s ``model_alias``. In single-model mode the one model's :attr:`~ServerMode.model_id`
    (its first alias); in router mode its own name, as llama.cpp's router starts each child with
    ``--alias NAME`` (``server-models.cpp``), so a preset's aliases stay other names of it."""
    return (mode.model_id or name) if name == mode.single_model else name


def listed_aliases(mode: ServerMode, name: str, aliases: Sequence[str]) -> list[str]:
    """``aliases`` of model ``name`` in ``GET /v1/models``: in single-model mode llama-server's set
    (its ``--alias`` names sorted, or its id alone without any: ``server.cpp`` adds the model's name
    "for consistency between server router mode and single-model mode"); in router mode ``aliases``."""
    if name != mode.single_model:
        return list(aliases)
    return list(mode.aliases) or [served_name(mode, name)]


def target_model(mode: ServerMode, requested: str | None) -> str:
    """The model a request goes to: in single-model mode always the one model, whatever it names;
    in router mode the name it gives, and a request that names none is refused as llama.cpp refuses it."""
    if mode.single_model is not None:
        return mode.single_model
    name = (requested or "").strip()
    if not name:
        raise CommandRejected("model_missing", MISSING_MODEL)
    return name


def listed(mode: ServerMode, name: str) -> bool:
    """Whether ``GET /models`` and ``GET /v1/models`` show model ``name``: in single-model mode only its model."""
    return mode.single_model is None or name == mode.single_model


def not_serving(mode: ServerMode, state: RouterState, starting: frozenset[str] = frozenset()) -> str | None:
    """Why ``/health`` answers 503 in single-model mode, or None: llama-server's "Loading model" while
    its model downloads or loads, the reason when it failed (or hung, and is being killed). A model that
    is loaded, asleep (the next request wakes it), stopping or unloaded (the next request loads it) is
    served; one whose files are not here yet is not (``-hf`` before its start-up download is recorded:
    a 200 then was a lie), nor one the start-up load is still owed (``starting``: between its
    download's end and its load)."""
    if mode.single_model is None:
        return None
    model = state.models.get(mode.single_model)
    if model is None:
        return LOADING
    if model.status in (ModelStatus.FAILED, ModelStatus.UNRESPONSIVE) and model.last_error is not None:
        return f"model {model.name!r} failed: {model.last_error.message}"
    if model.name in starting and model.status is not ModelStatus.LOADED:
        return LOADING
    return LOADING if model.status in _NOT_SERVING or not model.available else None


def fake_timing(mode: ServerMode, switched_on: bool) -> bool:
    """Whether ``LLAMA_SERVER_DEBUG_FAKE_TIMING`` (``switched_on``: the variable is set and not empty)
    slows loads and requests: in router mode only, as llama-server reads it only there (its router's
    ``server_models``, for the scheduling tests); a single model is served at its own pace, so a tool
    that sets it for every server it starts (llama.cpp's test harness) is not slowed down."""
    return switched_on and not mode.single


def worker_log_prefix(mode: ServerMode, identity: str) -> str:
    """What a worker's forwarded lines start with in the service's log. In router mode ``[identity] ``
    (``inference:MODEL:INSTANCE``, ``download:JOB``), as llama.cpp's router prefixes its children's
    lines; in single-model mode nothing for the one model's inference workers, since llama-server is
    then one process that prints its lines bare (download workers keep their prefix)."""
    kind, _, rest = identity.partition(":")
    model = rest.rpartition(":")[0]  # a model's name may hold ':' (``user/repo:Q4_K_M``); an instance id does not
    if kind == "inference" and mode.single_model is not None and model == mode.single_model:
        return ""
    return f"[{identity}] "
