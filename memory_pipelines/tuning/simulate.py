"""Synthetic retrieval logs from hidden true parameters, to test that the tuner recovers them.

Each build has a mode, semantic candidates (task, learning, capability, memory) with relevance and age,
recent events and (outside chat) the OKR profile. The *active* config scores and orders them as the online
builder would, items are injected greedily within the token budget, and each labelled candidate is used
with probability sigmoid(alpha + beta · log true_score) — the true score being relevance × decay × weight
under the *hidden* config. `no_signal=True` makes use independent of everything (a log the tuner must not
publish from). `randomized_rate` injects a random order for that share of builds (the exploration option).
`simulate_feature_log` writes logged features too (sql/009), for the learned ranker.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..context.features import candidate_features
from ..context.retrieve import Candidate
from ..context.scoring import PROFILE_SOURCES, UNBOUNDED, ScoringConfig
from ..vocabulary import CONTEXT_MODES as MODES
from .frames import BUILD_COLUMNS, CANDIDATE_COLUMNS, FEATURES, LogFrames, normalize_builds, normalize_candidates

SEMANTIC_MIX = {"task": 0.4, "learning": 0.3, "capability": 0.1, "memory": 0.2}
AGE_SCALE = {"task": 60.0, "learning": 200.0, "capability": 300.0, "memory": 120.0, "okr": 60.0}


def hidden_truth() -> ScoringConfig:
    """A plausible 'true' config that differs clearly from the spec's defaults (pure exponential decay and
    unbounded weights: the form the fit assumes)."""
    return ScoringConfig(
        **UNBOUNDED,
        version=0,
        half_lives={
            "task": 12.0,
            "learning": 200.0,
            "event": 0.5,
            "okr": None,
            "capability": None,
            "memory": None,
        },
        mode_weights={
            "task": {"plan": 1.0, "execute": 0.6, "debug": 0.5, "chat": 1.0},
            "learning": {"plan": 1.6, "execute": 1.8, "debug": 1.0, "chat": 0.8},
            "event": {"plan": 0.8, "execute": 1.2, "debug": 2.5, "chat": 0.5},
            "okr": {"plan": 1.0, "execute": 1.0, "debug": 1.0, "chat": 1.0},
            "capability": {"plan": 0.5, "execute": 1.4, "debug": 0.6, "chat": 1.2},
            "memory": {"plan": 1.2, "execute": 0.8, "debug": 0.8, "chat": 2.0},
        },
    )


HIDDEN_SOURCE_WEIGHTS: dict[str, float] = {"task": 0.5, "memory": 2.0}
HIDDEN_DECAY_FLOOR = 0.0


def hidden_source_truth() -> ScoringConfig:
    """A truth that differs from the defaults only where the half-life / mode-weight fit cannot see: the
    seed's mode weights (the active config's, the source-weight fit's offset) times hidden per-source
    weights (geometric mean 1 over the fitted sources), and a hidden decay floor under the truth's
    half-lives."""
    base = hidden_truth()
    return ScoringConfig(
        version=0,
        half_lives=dict(base.half_lives),
        mode_weights={k: dict(v) for k, v in ScoringConfig().mode_weights.items()},
        relevance_floors={},
        decay_floor=HIDDEN_DECAY_FLOOR,
        weight_bounds=(0.0, 1e9),
        source_weights=dict(HIDDEN_SOURCE_WEIGHTS),
    )


@dataclass
class SimSpec:
    """What to simulate; `truth` is hidden from the tuner, `active` is what the logged builds used."""

    truth: ScoringConfig = field(default_factory=hidden_truth)
    active: ScoringConfig = field(default_factory=ScoringConfig)
    n_builds: int = 2000
    semantic_per_build: tuple[int, int] = (12, 24)
    events_per_build: tuple[int, int] = (0, 6)
    token_budget: int = 800
    alpha: float = 0.5
    beta: float = 2.0
    label_scope: str = "injected"  # "injected": feedback marks shown items only; "all": oracle labels
    randomized_rate: float = 0.0
    position_bias: float = 0.0  # logit penalty per log(position) of injected items
    no_signal: bool = False
    base_rate: float = 0.15  # P(used) when no_signal
    owners: tuple[str, ...] = ("sim-a", "sim-b")
    start: datetime = field(default_factory=lambda: datetime(2025, 1, 1, tzinfo=UTC))
    span_days: float = 120.0
    config_version: int = 1
    seed: int = 0


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _draw_build(spec: SimSpec, rng: np.random.Generator, mode: str) -> dict[str, np.ndarray]:
    n_sem = int(rng.integers(spec.semantic_per_build[0], spec.semantic_per_build[1] + 1))
    n_ev = int(rng.integers(spec.events_per_build[0], spec.events_per_build[1] + 1))
    n_okr = 0 if mode == "chat" else int(rng.integers(0, 4))
    sem_sources = rng.choice(list(SEMANTIC_MIX), size=n_sem, p=list(SEMANTIC_MIX.values()))
    sources = np.concatenate(
        [
            np.array(["okr"] * n_okr, dtype=object),
            sem_sources.astype(object),
            np.array(["event"] * n_ev, dtype=object),
        ]
    )
    ages = np.empty(len(sources))
    for i, s in enumerate(sources):
        if s == "event":
            ages[i] = rng.uniform(0, 3.0 if mode == "debug" else 1.0)
        else:
            ages[i] = rng.exponential(AGE_SCALE[s])
    rel = np.concatenate(
        [
            np.ones(n_okr),
            np.clip(rng.beta(2.0, 2.5, size=n_sem), 0.02, 1.0),
            0.5 * (1 + rng.choice([0.0, 1 / 3, 2 / 3, 1.0], p=[0.4, 0.3, 0.2, 0.1], size=n_ev)),
        ]
    )
    tokens = np.concatenate(
        [rng.integers(8, 20, n_okr), rng.integers(20, 90, n_sem), rng.integers(25, 60, n_ev)]
    )
    return {
        "source": sources,
        "age": ages,
        "rel": rel,
        "tokens": tokens.astype(float),
        "n_okr": np.array(n_okr),
    }


def _scores(
    config: ScoringConfig, sources: np.ndarray, ages: np.ndarray, rel: np.ndarray, mode: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    decay = np.array([config.decay(s, a) for s, a in zip(sources, ages, strict=True)])
    weight = np.array([config.weight(s, mode) for s in sources])
    return decay, weight, rel * decay * weight


def _inject(order: np.ndarray, tokens: np.ndarray, n_okr: int, budget: int) -> dict[int, int]:
    """Greedy fill as the online budget does (profile first; skip what does not fit): index -> mmr_rank."""
    used = 10.0 + sum(tokens[:n_okr])
    injected = {i: 0 for i in range(n_okr)}
    rank = 0
    for i in order:
        if i < n_okr:
            continue
        if used + tokens[i] <= budget:
            used += tokens[i]
            rank += 1
            injected[int(i)] = rank
    return injected


def simulate_log(spec: SimSpec | None = None) -> LogFrames:
    """A synthetic log as frames in the shape `frames.load_log` returns."""
    spec = spec or SimSpec()
    rng = np.random.default_rng(spec.seed)
    builds: list[tuple] = []
    cands: list[tuple] = []
    step = spec.span_days / max(spec.n_builds, 1)
    for b in range(spec.n_builds):
        mode = MODES[int(rng.integers(0, len(MODES)))]
        owner = spec.owners[b % len(spec.owners)]
        created = spec.start + timedelta(days=b * step)
        d = _draw_build(spec, rng, mode)
        src, age, rel, tok, n_okr = d["source"], d["age"], d["rel"], d["tokens"], int(d["n_okr"])
        a_decay, a_weight, a_score = _scores(spec.active, src, age, rel, mode)
        _, _, t_score = _scores(spec.truth, src, age, rel, mode)
        randomized = bool(rng.random() < spec.randomized_rate)
        rest = np.arange(n_okr, len(src))
        order = rng.permutation(rest) if randomized else rest[np.argsort(-a_score[rest], kind="stable")]
        injected = _inject(order, tok, n_okr, spec.token_budget)
        log_rank = np.empty(len(src), dtype=int)
        log_rank[np.concatenate([np.arange(n_okr), rest[np.argsort(-a_score[rest], kind="stable")]])] = (
            np.arange(1, len(src) + 1)
        )
        logit = spec.alpha + spec.beta * np.log(np.maximum(t_score, 1e-12))
        pos = np.array([max(injected.get(i, 1), 1) for i in range(len(src))], dtype=float)
        logit = logit - spec.position_bias * np.log(pos)
        p = np.full(len(src), spec.base_rate) if spec.no_signal else _sigmoid(logit)
        shown = np.array([i in injected for i in range(len(src))])
        labelled = shown if spec.label_scope == "injected" else np.ones(len(src), dtype=bool)
        used = (rng.random(len(src)) < p) & labelled & ~np.isin(src, PROFILE_SOURCES)  # as feedback online
        rid = str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | b))
        inj_sources = [str(src[i]) for i in sorted(injected, key=lambda i: injected[i])]
        token_used = int(10 + sum(tok[i] for i in injected))
        builds.append(
            (
                rid,
                owner,
                mode,
                spec.token_budget,
                token_used,
                len(src),
                len(injected),
                spec.config_version,
                None,
                randomized,
                created,
                created,
                created + timedelta(minutes=1),
                inj_sources,
            )
        )
        for i in range(len(src)):
            s = str(src[i])
            cands.append(
                (
                    rid,
                    owner,
                    s,
                    f"{s}-{b}-{i}",
                    float(rel[i]),
                    float(age[i]),
                    mode,
                    float(a_decay[i]),
                    float(a_weight[i]),
                    float(a_score[i]),
                    int(log_rank[i]),
                    float(injected[i]) if i in injected else math.nan,
                    float(tok[i]) if i in injected else math.nan,
                    bool(shown[i]),
                    bool(used[i]),
                )
            )
    bdf = pd.DataFrame(builds, columns=[*BUILD_COLUMNS, "injected_sources"])
    cdf = pd.DataFrame(cands, columns=list(CANDIDATE_COLUMNS))
    return LogFrames(normalize_builds(bdf), normalize_candidates(cdf))


def simulate_feature_log(
    n_builds: int = 400,
    per_build: int = 15,
    *,
    driver: Callable[[int], str] = lambda b: "keyword",
    strength: float = 6.0,
    base: float = -4.0,
    seed: int = 0,
    start: datetime = datetime(2025, 1, 1, tzinfo=UTC),
) -> LogFrames:
    """A log with logged features (sql/009) for the learned ranker: memories (no decay, weight 1) whose fused
    score is 0.6 × semantic + 0.4 × keyword, as hybrid search fuses, every candidate injected and labelled,
    and used with probability sigmoid(base + strength × x), x being the channel `driver(build index)` names
    ("keyword" or "semantic"; a missing keyword channel reads 0). So the fused score predicts use, and
    the named channel predicts it better."""
    rng = np.random.default_rng(seed)
    builds: list[tuple] = []
    cands: list[tuple] = []
    for b in range(n_builds):
        mode = MODES[int(rng.integers(0, len(MODES)))]
        created = start + timedelta(hours=b)
        sem = rng.uniform(0, 1, per_build)
        kw = np.where(rng.random(per_build) < 0.7, rng.uniform(0, 1, per_build), np.nan)
        fused = 0.6 * sem + 0.4 * np.nan_to_num(kw)
        sims = [
            Candidate("memory", f"memory-{b}-{i}", "", f"simulated memory {b}-{i}",
                      created - timedelta(days=float(rng.uniform(0, 90))), float(fused[i]),
                      semantic=float(sem[i]), keyword=None if np.isnan(kw[i]) else float(kw[i]),
                      keyword_evidence=None if np.isnan(kw[i]) else float(kw[i]) * 1.5)
            for i in range(per_build)
        ]
        feats = candidate_features(sims, "en", created)
        x = np.nan_to_num(kw) if driver(b) == "keyword" else sem
        used = rng.random(per_build) < _sigmoid(base + strength * x)
        order = np.argsort(-fused, kind="stable")
        rank = np.empty(per_build, dtype=int)
        rank[order] = np.arange(1, per_build + 1)
        rid = str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | b))
        builds.append((rid, "sim-f", mode, 800, 40 * per_build, per_build, per_build, 1, None, False, created,
                       created, created + timedelta(minutes=1), ["memory"] * per_build))
        for i in range(per_build):
            cands.append((rid, "sim-f", "memory", f"memory-{b}-{i}", float(fused[i]), feats[i]["age_days"], mode,
                          1.0, 1.0, float(fused[i]), int(rank[i]), float(rank[i]), 40.0, True, bool(used[i]),
                          feats[i]))
    bdf = pd.DataFrame(builds, columns=[*BUILD_COLUMNS, "injected_sources"])
    cdf = pd.DataFrame(cands, columns=[*CANDIDATE_COLUMNS, FEATURES])
    return LogFrames(normalize_builds(bdf), normalize_candidates(cdf))


def write_log_rows(pool: ConnectionPool, frames: LogFrames) -> int:
    """Insert a (simulated) log into `retrievals` / `retrieval_candidates` (with the features column when the
    frames have one); returns the builds written."""
    b = frames.builds
    with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO retrievals (id, owner_id, query, mode, token_budget, token_used, candidates_count,"
            " injected_count, injected_sources, config_version, degraded, randomized, as_of, created_at,"
            " feedback_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    r.retrieval_id,
                    r.owner_id,
                    f"simulated query {i}",
                    r.mode,
                    int(r.token_budget),
                    int(r.token_used),
                    int(r.candidates_count),
                    int(r.injected_count),
                    Jsonb(list(getattr(r, "injected_sources", []) or [])),
                    _opt_int(r.config_version),
                    None,
                    bool(r.randomized),
                    r.as_of.to_pydatetime(),
                    r.created_at.to_pydatetime(),
                    None if pd.isna(r.feedback_at) else r.feedback_at.to_pydatetime(),
                )
                for i, r in enumerate(b.itertuples(index=False))
            ],
        )
        features = FEATURES in frames.candidates
        with cur.copy(
            "COPY retrieval_candidates (retrieval_id, owner_id, source, item_id, relevance, age_days, mode,"
            " decay, mode_weight, score, rank, mmr_rank, tokens, injected, used, features) FROM STDIN"
        ) as copy:
            for r in frames.candidates.itertuples(index=False):
                f = getattr(r, FEATURES) if features else None
                copy.write_row(
                    (
                        r.retrieval_id,
                        r.owner_id,
                        r.source,
                        r.item_id,
                        r.relevance,
                        None if pd.isna(r.age_days) else r.age_days,
                        r.mode,
                        r.decay,
                        r.mode_weight,
                        r.score,
                        int(r.rank),
                        _opt_int(r.mmr_rank),
                        _opt_int(r.tokens),
                        bool(r.injected),
                        bool(r.used),
                        Jsonb(f) if isinstance(f, dict) else None,
                    )
                )
    return len(b)


def _opt_int(v: object) -> int | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else int(v)
