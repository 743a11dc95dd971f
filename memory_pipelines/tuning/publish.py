"""The publishing gate: a fitted config becomes active only when every check passes.

Checks: enough data (training builds and labelled candidates, held-out builds with a used item), a signal
(usage follows the score), something actually re-fitted, a held-out improvement in hit@5 or nDCG@10 of at
least `min_improvement` whose paired-bootstrap 95 % interval excludes zero, no guard metric worse by more
than `max_regression`, and every parameter within bounds (a learned ranker: well-formed, known inputs,
finite numbers). On pass: `add_config` (with what it was fitted on and its evaluation) then `activate`; the
online builder reads the active version on its next build. On fail nothing is written. Rollback is
`activate(pool, earlier_version)` (`memory-pipelines scoring activate V`); a version without a ranker
drops the ranker with it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from ..context.config import activate, add_config
from ..context.features import Ranker
from ..infra.errors import ValidationError
from .fit import config_from_dict


@dataclass(frozen=True)
class Gate:
    min_train_builds: int = 200
    min_train_labelled: int = 2000
    min_test_builds: int = 50  # held-out builds with at least one used item
    min_improvement: float = 0.01  # absolute, on hit@5 or nDCG@10
    max_regression: float = 0.02  # no guard metric (hit@5, nDCG@10, MRR) may drop more
    half_life_bounds: tuple[float, float] = (0.25, 3650.0)
    weight_bounds: tuple[float, float] = (0.05, 5.0)


def _check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "passed": bool(passed), "detail": detail}


def gate_checks(result: dict[str, Any], gate: Gate | None = None) -> list[dict[str, Any]]:
    """Each check of the gate on a `tune_and_evaluate` result (the Dagster asset check maps these 1:1)."""
    gate = gate or Gate()
    data, fit, ev = result["data"], result["fit"], result["evaluation"]
    n_test = (ev.get("configs", {}).get("active", {}).get("overall", {}) or {}).get("n_with_use", 0)
    checks = [
        _check(
            "enough_data",
            data["train_builds"] >= gate.min_train_builds
            and data["train_labelled"] >= gate.min_train_labelled
            and n_test >= gate.min_test_builds,
            f"train builds {data['train_builds']} (≥ {gate.min_train_builds}), labelled candidates "
            f"{data['train_labelled']} (≥ {gate.min_train_labelled}), held-out builds with a used item "
            f"{n_test} (≥ {gate.min_test_builds})",
        ),
        _check(
            "signal",
            bool(fit["signal"]),
            f"log-relevance coefficient {_fmt(fit['relevance_coef'])}, 95% CI "
            f"[{_fmt(fit['relevance_ci'][0])}, {_fmt(fit['relevance_ci'][1])}], "
            f"z {_fmt(fit.get('relevance_z'))} (must be clearly above 0)",
        ),
    ]
    refit = [p["name"] for p in fit["params"] if p["status"] in ("fitted", "clamped")]
    checks.append(_check("refitted", bool(refit), f"{len(refit)} parameters re-fitted"))
    deltas = ev.get("deltas", {}).get("proposed", {})
    gains = []
    for metric in ("hit@5", "ndcg@10"):
        d = deltas.get(metric) or {}
        if d.get("delta") is not None and d["delta"] >= gate.min_improvement and d["ci_low"] > 0:
            gains.append(metric)
    checks.append(
        _check(
            "improvement",
            bool(gains),
            "; ".join(
                f"Δ{m} {_fmt((deltas.get(m) or {}).get('delta'))} "
                f"[{_fmt((deltas.get(m) or {}).get('ci_low'))}, {_fmt((deltas.get(m) or {}).get('ci_high'))}]"
                for m in ("hit@5", "ndcg@10")
            )
            + f" (need ≥ {gate.min_improvement} with the 95% interval above 0)",
        )
    )
    worse = [
        m
        for m in ("hit@5", "ndcg@10", "mrr")
        if (deltas.get(m) or {}).get("delta") is not None and deltas[m]["delta"] < -gate.max_regression
    ]
    checks.append(
        _check(
            "no_regression",
            not worse and bool(deltas),
            f"worse by more than {gate.max_regression}: {', '.join(worse) or 'none'}",
        )
    )
    bad = _out_of_bounds(result["proposed"], gate)
    checks.append(_check("within_bounds", not bad, f"out of bounds: {', '.join(bad) or 'none'}"))
    return checks


def _out_of_bounds(proposed: dict[str, Any], gate: Gate) -> list[str]:
    bad = []
    lo, hi = gate.half_life_bounds
    for s, h in proposed["half_lives"].items():
        if h is not None and not (isinstance(h, int | float) and math.isfinite(h) and lo <= h <= hi):
            bad.append(f"half_life.{s}={h}")
    lo, hi = gate.weight_bounds
    for s, ws in proposed["mode_weights"].items():
        for m, w in ws.items():
            if not (isinstance(w, int | float) and math.isfinite(w) and lo <= w <= hi):
                bad.append(f"weight.{s}.{m}={w}")
    params = proposed.get("params") or {}
    for s, w in (params.get("source_weights") or {}).items():
        if not (isinstance(w, int | float) and math.isfinite(w) and lo <= w <= hi):
            bad.append(f"source_weight.{s}={w}")
    floor = params.get("decay_floor")
    if floor is not None and not (isinstance(floor, int | float) and 0 <= floor < 1):
        bad.append(f"decay_floor={floor}")
    for ch, f in (params.get("relevance_floors") or {}).items():
        if not (isinstance(f, int | float) and 0 <= f <= 1):
            bad.append(f"relevance_floor.{ch}={f}")
    if params.get("ranker"):
        try:
            Ranker.from_params(params["ranker"])
        except ValidationError as exc:
            bad.append(f"ranker ({exc})")
    return bad


def _fmt(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def decide(result: dict[str, Any], gate: Gate | None = None) -> dict[str, Any]:
    """{"publish": bool, "checks": [...], "reasons": [failed checks' details]} without touching anything."""
    checks = gate_checks(result, gate)
    failed = [c for c in checks if not c["passed"]]
    return {
        "publish": not failed,
        "version": None,
        "checks": checks,
        "reasons": [f"{c['name']}: {c['detail']}" for c in failed],
    }


def evaluation_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What is stored with a published version: metrics overall and by mode, deltas, the gate's checks."""
    ev = result["evaluation"]
    return {
        "population": ev["population"],
        "configs": ev["configs"],
        "deltas": ev.get("deltas", {}),
        "checks": result.get("decision", {}).get("checks"),
    }


def publish_result(
    pool: ConnectionPool, result: dict[str, Any], gate: Gate | None = None, *, note: str | None = None
) -> dict[str, Any]:
    """Add and activate the proposed config when the gate passes; otherwise write nothing and say why."""
    gate = gate or Gate()
    decision = decide(result, gate)
    if not decision["publish"]:
        return decision
    fitted_on = {
        **result["data"],
        "params": result["fit"]["params"],
        "notes": result["fit"]["notes"],
        "relevance_coef": result["fit"]["relevance_coef"],
        "gate": asdict(gate),
        "base_version": result["active"]["version"],
    }
    evaluation = {**evaluation_summary(result), "checks": decision["checks"]}
    evaluation.pop("caveats", None)
    version = add_config(
        pool,
        config_from_dict(result["proposed"]),
        fitted_on=jsonable(fitted_on),
        evaluation=jsonable(evaluation),
        note=note or f"tuned from {result['data']['train_builds']} builds",
    )
    activate(pool, version)
    return {**decision, "version": version}


def jsonable(obj: Any) -> Any:
    """NaN / inf are not JSON: store them as null."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
