"""Ray Serve app: GS-PowerOpt and its baselines on the standard test functions, over HTTP.

``serve run rayml.actors.serve.optimize:app`` (or ``rayml serve optimize``) exposes, through a
FastAPI ingress (OpenAPI schema at ``/openapi.json``, docs at ``/docs``), ``POST /`` with a JSON
body::

    {"function": "ackley", "dim": 2, "method": "gs-poweropt", "iterations": 200,
     "samples": 50, "sigma": 1.0, "power": 20.0, "lr": 0.1, "seed": 0, "x0": [3.0, 0.0]}

and answers ``{"x": [...], "fun": f(x), "gap": f(x) - f*, "evals": n, "method": ...}``. Every
field but ``function`` and ``dim`` is optional. The request model (``OptimizeRequest``) bounds
every number; work per request is bounded in evaluations (``iterations * (samples + 1) <=
MAX_EVALS``); bad input gets a 422 naming the field, a body over 64 KiB a 413, never a 500, and the
replica stays up.
"""


# No ``from __future__ import annotations`` here: FastAPI (through Serve's ingress) must see the
# request model's class in the route's signature, not a string.
import asyncio
from typing import Any, Optional

import numpy as np
from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator
from ray import serve

from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api
from rayml.optim import smoothing_baselines as sb
from rayml.optim._zeroth_order import Negated
from rayml.optim.gs_poweropt import GSPowerOptConfig, maximize
from rayml.optim.test_functions import FUNCTIONS, optimum

__all__ = ["Optimizer", "OptimizeRequest", "OptimizeResponse", "app", "api", "MAX_EVALS", "parse_request", "solve",
           "BadRequest"]

MAX_EVALS = 200_000
MAX_DIM = 100
METHODS = ("gs-poweropt", "gaussian-smoothing", "homotopy", "zo-slgh", "cma-es")
_FLOAT = dict(allow_inf_nan=False, strict=False)


class BadRequest(ValueError):
    """A request field is missing, of the wrong type, or out of range."""


class OptimizeRequest(BaseModel):
    """One optimisation: a test function, its dimension, the method and its settings."""

    model_config = ConfigDict(extra="forbid")

    function: str = Field(description=f"one of {sorted(FUNCTIONS)}")
    dim: StrictInt = Field(ge=1, le=MAX_DIM)
    method: str = Field("gs-poweropt", description=f"one of {list(METHODS)}")
    iterations: StrictInt = Field(200, ge=1, le=100_000)
    samples: StrictInt = Field(50, ge=2, le=10_000)
    sigma: float = Field(1.0, ge=1e-6, le=1e3, **_FLOAT)
    power: float = Field(20.0, ge=1e-6, le=1e4, **_FLOAT)
    lr: float = Field(0.1, ge=1e-9, le=1e3, **_FLOAT)
    seed: StrictInt = Field(0, ge=0, le=2**63 - 1)
    x0: Optional[list[float]] = Field(None, description="the start point (default: 3 away from the optimum)")

    @field_validator("function", "method")
    @classmethod
    def _known(cls, v: str, info) -> str:
        allowed = sorted(FUNCTIONS) if info.field_name == "function" else list(METHODS)
        if v not in allowed:
            raise ValueError(f"must be one of {allowed}")
        return v

    @field_validator("x0")
    @classmethod
    def _finite(cls, v):
        if v is not None and not all(np.isfinite(x) for x in v):
            raise ValueError("must hold finite numbers")
        return v

    @model_validator(mode="after")
    def _bounded(self):
        if self.iterations * (self.samples + 1) > MAX_EVALS:
            raise ValueError(f"iterations * (samples + 1) must be <= {MAX_EVALS}")
        if self.x0 is not None and len(self.x0) != self.dim:
            raise ValueError(f"'x0' must be a list of {self.dim} finite numbers")
        return self


class OptimizeResponse(BaseModel):
    """The best point found, its value and gap to the optimum, and the evaluations spent."""

    method: str
    x: list[float]
    fun: float
    gap: float
    evals: int
    iterations: int


def parse_request(body: Any) -> dict:
    """Validate a request body; returns the settings (``x0`` filled in) or raises ``BadRequest``
    naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        req = OptimizeRequest.model_validate(body).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise BadRequest(f"'{where}': {err['msg']}") from None
    if req["x0"] is None:
        u = np.random.default_rng(req["seed"]).standard_normal(req["dim"])
        req["x0"] = (optimum(req["function"], req["dim"]) + 3.0 * u / np.linalg.norm(u)).tolist()
    return req


def solve(req: dict) -> dict:
    """Run the requested optimiser (it maximises ``-f``); returns the JSON answer."""
    g = FUNCTIONS[req["function"]]
    f, x0 = Negated(g), np.array(req["x0"])
    K, T = req["samples"], req["iterations"]
    budget = T * (K + 1) + 1
    if req["method"] == "gs-poweropt":
        cfg = GSPowerOptConfig(sigma=req["sigma"], power=req["power"], samples=K, lr=req["lr"], iterations=T)
        res = maximize(f, x0, cfg, seed=req["seed"], max_evals=budget)
    elif req["method"] == "cma-es":
        res = sb.cma_es(f, x0, sigma=req["sigma"], samples=K, max_evals=budget, seed=req["seed"])
    else:
        sc = sb.SmoothingConfig(sigma=req["sigma"], sigma_min=min(0.01, req["sigma"]), samples=K,
                                lr=req["lr"], iterations=T)
        fn = {"gaussian-smoothing": sb.gaussian_smoothing, "homotopy": sb.gaussian_homotopy,
              "zo-slgh": sb.zo_slgh}[req["method"]]
        res = fn(f, x0, sc, seed=req["seed"], max_evals=budget)
    f_star = float(g(optimum(req["function"], req["dim"])))
    return {"method": req["method"], "x": res.x.tolist(), "fun": -res.fun, "gap": -res.fun - f_star,
            "evals": res.evals, "iterations": res.iterations}


api = make_api("rayml optimize: GS-PowerOpt and baselines on test functions", max_body_bytes=64 * 1024)


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class Optimizer:
    """The deployment: validated requests, the bounded optimisation in a thread, JSON answers."""

    @api.post("/", response_model=OptimizeResponse)
    async def optimize(self, request: OptimizeRequest) -> dict:
        try:
            req = parse_request(request.model_dump())
            return await asyncio.to_thread(solve, req)
        except ValueError as exc:  # e.g. a config the optimiser rejects
            raise HTTPException(status_code=400, detail=str(exc)) from None


app = Optimizer.bind()
