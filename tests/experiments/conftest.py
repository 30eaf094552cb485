"""Shared fixture of the per-experiment tests (``tests/experiments`` mirrors ``rayml/experiments``)."""

from __future__ import annotations

import math

import pytest

from rayml import experiments, registry, results


def _measured(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


@pytest.fixture
def unmeasured_claims(ray_session):
    """``f(name)``: the claim paths of experiment ``name`` that its ``tiny`` run leaves without a
    number (a claim on such a path can never hold), plus the paired tests whose table is missing."""

    def check(name: str) -> list[str]:
        record = experiments.run(name, size="tiny", seed=1)
        missing = []
        for claim in registry.get(name).load_experiment().claims:
            paths = [claim.metric] + ([claim.compare] if isinstance(claim.compare, str) else [])
            for path in paths:
                try:
                    value = results.lookup(record, path)
                except KeyError:
                    value = None
                if not _measured(value):
                    missing.append(path)
            if claim.test and claim.table not in record["tables"]:
                missing.append(f"tables.{claim.table}")
        return missing

    return check
