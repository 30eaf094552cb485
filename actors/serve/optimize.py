"""Ray Serve app: GS-PowerOpt and its baselines on the standard test functions, over HTTP.

``serve run rayml.actors.serve.optimize:app`` (or ``rayml serve optimize``) exposes
``POST /`` with a JSON body::

    {"function": "ackley", "dim": 2, "method": "gs-poweropt", "iterations": 200,
     "samples": 50, "sigma": 1.0, "power": 20.0, "lr": 0.1, "seed": 0, "x0": [3.0, 0.0]}

and answers ``{"x": [...], "fun": f(x), "gap": f(x) - f*, "evals": n, "method": ...}``. Every
field but ``function`` and ``dim`` is optional. Work per request is bounded in evaluations
(``iterations * (samples + 1) <= MAX_EVALS``); bad input gets a 400 with a message naming the
field, never a 500, and the replica stays up.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from rayml.actors.serve.http import json_body

from rayml.optim import smoothing_baselines as sb
from rayml.optim.gs_poweropt import GSPowerOptConfig, maximize
from rayml.optim.test_functions import FUNCTIONS, optimum
from rayml.optim._zeroth_order import Negated

__all__ = ["Optimizer", "app", "MAX_EVALS", "parse_request", "solve"]

MAX_EVALS = 200_000
MAX_DIM = 100
METHODS = ("gs-poweropt", "gaussian-smoothing", "homotopy", "zo-slgh", "cma-es")
_NUMBER = (int, float)


class BadRequest(ValueError):
    """A request field is missing, of the wrong type, or out of range."""


def _field(body: dict, name: str, kind, default=None, lo=None, hi=None):
    value = body.get(name, default)
    if value is None:
        raise BadRequest(f"'{name}' is required")
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise BadRequest(f"'{name}' must be an integer, got {value!r}")
    if kind is float and (not isinstance(value, _NUMBER) or isinstance(value, bool) or not np.isfinite(value)):
        raise BadRequest(f"'{name}' must be a finite number, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise BadRequest(f"'{name}' must be a string, got {value!r}")
    if lo is not None and value < lo or hi is not None and value > hi:
        raise BadRequest(f"'{name}' must be in [{lo}, {hi}], got {value!r}")
    return value


def parse_request(body: Any) -> dict:
    """Validate a request body; returns the settings or raises ``BadRequest`` naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(body) - {"function", "dim", "method", "iterations", "samples", "sigma", "power",
                           "lr", "seed", "x0"}
    if unknown:
        raise BadRequest(f"unknown fields {sorted(unknown)}")
    req = {
        "function": _field(body, "function", str),
        "dim": _field(body, "dim", int, lo=1, hi=MAX_DIM),
        "method": _field(body, "method", str, "gs-poweropt"),
        "iterations": _field(body, "iterations", int, 200, lo=1, hi=100_000),
        "samples": _field(body, "samples", int, 50, lo=2, hi=10_000),
        "sigma": _field(body, "sigma", float, 1.0, lo=1e-6, hi=1e3),
        "power": _field(body, "power", float, 20.0, lo=1e-6, hi=1e4),
        "lr": _field(body, "lr", float, 0.1, lo=1e-9, hi=1e3),
        "seed": _field(body, "seed", int, 0, lo=0, hi=2**63 - 1),
    }
    if req["function"] not in FUNCTIONS:
        raise BadRequest(f"'function' must be one of {sorted(FUNCTIONS)}, got {req['function']!r}")
    if req["method"] not in METHODS:
        raise BadRequest(f"'method' must be one of {list(METHODS)}, got {req['method']!r}")
    if req["iterations"] * (req["samples"] + 1) > MAX_EVALS:
        raise BadRequest(f"iterations * (samples + 1) must be <= {MAX_EVALS}")
    x0 = body.get("x0")
    if x0 is None:
        u = np.random.default_rng(req["seed"]).standard_normal(req["dim"])
        x0 = (optimum(req["function"], req["dim"]) + 3.0 * u / np.linalg.norm(u)).tolist()
    if (not isinstance(x0, list) or len(x0) != req["dim"]
            or not all(isinstance(v, _NUMBER) and not isinstance(v, bool) and np.isfinite(v) for v in x0)):
        raise BadRequest(f"'x0' must be a list of {req['dim']} finite numbers")
    req["x0"] = [float(v) for v in x0]
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


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.5})
class Optimizer:
    """The deployment: validates, runs the bounded optimisation in a thread, answers JSON."""

    async def __call__(self, request: Request) -> JSONResponse:
        body, error = await json_body(request)
        if error is not None:
            return error
        try:
            req = parse_request(body)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            answer = await asyncio.to_thread(solve, req)
        except ValueError as exc:  # e.g. a config the optimiser rejects
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(answer)


app = Optimizer.bind()
