"""Vertex AI's ``POST /predict`` (llama-server's ``register_gcp_compat``, with ``AIP_MODE=PREDICTION``).

In single-model mode the body goes to the one model as it is (its instances need no ``model``);
in router mode one request's instances name one model, whose worker answers them all.

The body is checked here, not by the framework: ``instances`` is also the name of a dependency
(the instance supervisor), and Litestar takes a failed body field named like a dependency for a
fault of the server (a bare 500). The refusals are llama-server's own words
(``server-http.cpp``), and an empty list is what llama-server answers it with,
``{"predictions": []}``, without a model to route it to.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.params import SkipValidation
from litestar.status_codes import HTTP_200_OK

from service.api import schemas as s
from service.api.controllers._proxy_routes import PROXIED_ANSWER, PROXIED_PROBLEMS, Autoload
from service.api.problems import Problem
from service.api.proxy import Forwarding, proxy_request
from service.settings import Settings

MAX_INSTANCES = 128  # llama-server's


def _instances(data: Any, single: bool) -> list[Any]:
    """The request's instances, or llama-server's 400; in router mode each names a model."""
    instances = data.get("instances") if isinstance(data, dict) else None
    if not isinstance(instances, list):
        raise Problem(400, "invalid_request", "request body must include an array field named instances")
    if len(instances) > MAX_INSTANCES:
        raise Problem(400, "invalid_request", f"instances array exceeds maximum size of {MAX_INSTANCES}")
    if single:
        return instances  # each is the worker's to judge, as llama-server judges them
    try:
        return list(msgspec.convert(data, s.PredictRequest).instances)
    except msgspec.ValidationError as exc:
        raise Problem(400, "invalid_request", f"Validation failed for POST /predict: {exc}") from None


def predict_route(single: bool) -> Any:
    """``POST /predict`` as the mode declares it (``single``: the instances need no ``model``)."""
    description = (
        "Vertex AI's predictions, forwarded to the one model as they are (instances need no `model`)"
        if single
        else "Vertex AI's predictions, routed to the worker of the instances' `model` (one model per request)"
    )
    description += "; the worker answers them with `AIP_MODE=PREDICTION` in its environment, else 404."

    @post(
        "/predict",
        operation_id="postPredict",
        tags=["inference"],
        status_code=HTTP_200_OK,
        description=description,
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
        signature_namespace={"PredictBody": s.SinglePredictRequest if single else s.PredictRequest},
    )
    async def post_predict(
        data: SkipValidation[PredictBody],  # type: ignore[name-defined]  # noqa: F821  # from signature_namespace, per mode
        request: Request[Any, Any, Any],
        forwarding: Forwarding,
        settings: Settings,
        autoload: Autoload = None,
    ) -> Response[Any]:
        """``POST /predict``: ``{"instances": [{"@requestFormat", "model", ...}]}``."""
        instances = _instances(data, forwarding.mode.single)
        if forwarding.mode.single:
            return await proxy_request(request, forwarding, None, autoload)  # the one model, as llama-server
        if not instances:  # nothing to run, and no model to run it: answered here
            if settings.environment.get("AIP_MODE") != "PREDICTION":  # the workers' switch (inference/_cli.py)
                raise Problem(404, "not_found", "no route POST /predict")
            return Response({"predictions": []})
        models = {i.model.strip() for i in instances}
        if len(models) != 1:
            raise Problem(400, "invalid_request", f"the instances name {len(models)} models; one request, one model")
        return await proxy_request(request, forwarding, models.pop(), autoload)

    return post_predict
