"""Shared pieces of the benchmarks: a scratch database and a synthetic corpus loaded with COPY."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.evaluation.run import scratch_database
from memory_pipelines.index.owner_indexes import drop_owner_indexes, sync_owner_indexes
from memory_pipelines.infra.db import close_pool, connect, get_pool
from memory_pipelines.infra.embedded import database_url
from memory_pipelines.infra.migrate import index_build_memory_mb, migrate
from memory_pipelines.infra.settings import get_settings

WORDS = [
    "deploy",
    "rollback",
    "canary",
    "auth",
    "token",
    "oauth",
    "expired",
    "login",
    "rate",
    "limit",
    "quota",
    "billing",
    "cap",
    "timeout",
    "retry",
    "backoff",
    "database",
    "postgres",
    "pool",
    "connection",
    "index",
    "vector",
    "embedding",
    "search",
    "cache",
    "redis",
    "queue",
    "backlog",
    "kafka",
    "worker",
    "memory",
    "leak",
    "oom",
    "disk",
    "latency",
    "p99",
    "alert",
    "incident",
    "review",
    "test",
    "flaky",
    "regression",
    "ci",
    "pipeline",
    "build",
    "docker",
    "kubernetes",
    "cluster",
    "node",
    "service",
    "api",
    "gateway",
    "payment",
    "invoice",
    "customer",
    "report",
    "dashboard",
    "metric",
    "migration",
    "schema",
    "backup",
    "restore",
    "replica",
    "failover",
    "certificate",
    "tls",
    "dns",
    "network",
    "packet",
    "loss",
    "deadlock",
    "transaction",
]
ZH = [
    "部署",
    "回滚",
    "认证",
    "令牌",
    "过期",
    "限流",
    "超时",
    "重试",
    "数据库",
    "连接池",
    "索引",
    "向量",
    "缓存",
    "队列",
    "内存",
    "泄漏",
    "告警",
    "故障",
    "测试",
    "迁移",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pseudo_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count)]


# Text with the structure of real notes: 200 topics, each with its own 30 words, over a shared vocabulary
# of 3,000 words drawn by a Zipf law, plus the engineering words above. Embeddings of such text form
# clusters, as real embeddings do; uniform random text would not (every pair equally far apart).
_GENERAL = _pseudo_words(3000, 1) + WORDS
_ZIPF_CUM = list(itertools.accumulate(1 / (i + 1) for i in range(len(_GENERAL))))
_TOPICS = [_pseudo_words(30, 100 + t) for t in range(200)]


def note(rng: random.Random, topic: int | None = None) -> tuple[str, int]:
    """A synthetic note and its topic (`topic`, else a random one): mostly words of one topic, some common
    words, now and then Chinese."""
    t = rng.randrange(len(_TOPICS)) if topic is None else topic
    n = rng.randint(6, 16)
    words = [
        rng.choice(_TOPICS[t]) if rng.random() < 0.6 else rng.choices(_GENERAL, cum_weights=_ZIPF_CUM)[0]
        for _ in range(n)
    ]
    if rng.random() < 0.3:
        words.insert(rng.randint(0, n), rng.choice(ZH) + rng.choice(ZH))
    return " ".join(words), t


def topic_word(rng: random.Random, topic: int) -> str:
    """One of the topic's own words."""
    return rng.choice(_TOPICS[topic])


def topic_count() -> int:
    return len(_TOPICS)


def sentence(rng: random.Random) -> str:
    return note(rng)[0]


# Dense vectors with the geometry of the bundled model's embeddings (`fit_geometry.py`): topic centres drawn
# from the between-topic spread of the development sets' real embeddings, items from the within-topic spread,
# normalised. BENCH_GEOMETRY=isotropic gives the simpler generator instead (each item its random topic centre
# plus isotropic Gaussian noise, cosine ~0.7 to the centre): nearest neighbours barely nearer than the rest,
# which no real text model produces and which is the hardest case for an HNSW graph.
GEOMETRY = os.environ.get("BENCH_GEOMETRY", "e5")
if GEOMETRY not in ("e5", "isotropic"):
    raise SystemExit(f"BENCH_GEOMETRY must be e5 or isotropic, not {GEOMETRY!r}")
_FIT = {k: v.astype(np.float32) for k, v in np.load(Path(__file__).parent / "data" / "e5_geometry.npz").items()}


def _spread(rng: np.random.Generator, name: str) -> np.ndarray:
    basis, std, tail = _FIT[f"{name}_basis"], _FIT[f"{name}_std"], _FIT[f"{name}_tail"][0]
    return (rng.standard_normal(len(std)).astype(np.float32) * std) @ basis + tail * rng.standard_normal(
        basis.shape[1]
    ).astype(np.float32)


if GEOMETRY == "e5":
    _centre_rng = np.random.default_rng(7)
    _CENTRES = np.array([_FIT["mean"] + _spread(_centre_rng, "between") for _ in _TOPICS], dtype=np.float32)
else:
    _CENTRES = np.random.default_rng(7).standard_normal((len(_TOPICS), 384)).astype(np.float32)
    _CENTRES /= np.linalg.norm(_CENTRES, axis=1, keepdims=True)


def topic_vector(topic: int, rng: random.Random) -> np.ndarray:
    """A unit vector of the topic, drawn with `rng`'s next 32 bits."""
    draw = np.random.default_rng(rng.getrandbits(32))
    if GEOMETRY == "e5":
        v = _CENTRES[topic] + _spread(draw, "within")
    else:
        v = _CENTRES[topic] + draw.standard_normal(384).astype(np.float32) / np.sqrt(384)
    return v / np.linalg.norm(v)


@contextmanager
def scratch(dimension: int = 384, keep: str | None = None) -> Iterator[str]:
    """A throwaway database on the configured server (embedded by default); with `keep`, the database of
    that name, created and migrated when missing and never dropped, so a slow load is paid once."""
    settings = get_settings()
    embedder = FakeEmbedder(dimension)
    if keep is None:
        with scratch_database(database_url(settings), dimension, embedder.model_name) as url:
            yield url
        return
    server = database_url(settings)
    with connect(server, vector=False, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (keep,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(keep)))
    url = make_conninfo(server, dbname=keep)
    migrate(url, dimension, embedder.model_name)
    with connect(url, vector=False, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_loaded (name text PRIMARY KEY, facts jsonb NOT NULL)")
    try:
        yield url
    finally:
        close_pool(url)


def loaded_facts(url: str, name: str) -> dict | None:
    """What a kept database recorded when `name` was loaded into it (None: not loaded, or not kept)."""
    with connect(url, vector=False, autocommit=True) as conn:
        if not conn.execute("SELECT to_regclass('bench_loaded')").fetchone()[0]:
            return None
        row = conn.execute("SELECT facts FROM bench_loaded WHERE name = %s", (name,)).fetchone()
    return row[0] if row else None


def record_loaded(url: str, name: str, facts: dict) -> None:
    """Mark `name` as loaded in a kept database (a no-op in a throwaway one)."""
    with connect(url, vector=False, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('bench_loaded')").fetchone()[0]:
            conn.execute(
                "INSERT INTO bench_loaded VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET facts = excluded.facts",
                (name, Jsonb(facts)),
            )


LOADS: list[dict] = []
"""What each `load_tasks` call took (table, rows, COPY, index build): the benches report it."""


def index_memory(rows: int) -> str:
    """maintenance_work_mem for an HNSW build of `rows` 384-d vectors, as the product sizes it."""
    return f"{index_build_memory_mb(rows, 384)}MB"


def load_tasks(url: str, n: int, owners: list[tuple[str, int]], seed: int = 7, table: str = "tasks") -> FakeEmbedder:
    """COPY n synthetic rows with topic vectors into `tasks` (or `learnings`), owners by count.

    The owners' HNSW graphs are dropped for the load and built afterwards by the product's
    `sync_owner_indexes` (as the backfill does for bulk loads: one for each owner over the exact-scan cap);
    embedded_hash is set to the row's content_hash (md5 of its indexed text), so rows
    count as current. Timings go to LOADS.
    """
    rng = random.Random(seed)
    embedder = FakeEmbedder(384)
    pool = get_pool(url)
    owner_of = [o for o, count in owners for _ in range(count)]
    rng.shuffle(owner_of)
    body = "description" if table == "tasks" else "content"
    now = dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    with pool.connection() as conn:
        drop_owner_indexes(conn, table)
        with (
            conn.cursor() as cur,
            cur.copy(
                f"COPY {table} (owner_id, title, {body}, created_at, embedding, embedding_model)"
                " FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["text", "text", "text", "timestamptz", "vector", "text"])
            for i in range(n):
                (title, topic), desc = note(rng), sentence(rng)
                vec = topic_vector(topic, rng)
                created = now - dt.timedelta(days=rng.random() * 180)
                copy.write_row((owner_of[i], title, desc, created, vec, embedder.model_name))
                if i and i % 100_000 == 0:
                    log(f"  loaded {i} rows")
        conn.execute(f"UPDATE {table} SET embedded_hash = content_hash, embedded_at = now()")
        conn.commit()
        conn.autocommit = True
        conn.execute(f"VACUUM FULL {table}")  # compact again after the UPDATE, as the COPY left it
        conn.autocommit = False
        loaded = time.perf_counter()
        graphs = sync_owner_indexes(conn, 384, tables=[table]).built
        built = time.perf_counter()
        conn.autocommit = True
        conn.execute(f"VACUUM ANALYZE {table}")  # the steady state: visibility map set, statistics fresh
        conn.autocommit = False
        log(f"  {n} rows: COPY + hash in {loaded - started:.0f} s, {len(graphs)} owner HNSW graphs in"
            f" {built - loaded:.0f} s")
    LOADS.append({"table": table, "rows": n, "copy_seconds": round(loaded - started, 1),
                  "owner_graphs": len(graphs), "index_build_seconds": round(built - loaded, 1)})
    return embedder


SPEAKERS = ("Caroline", "Melanie")  # of every synthetic conversation; a question may name one


def load_conversations(
    url: str, n: int, owner: str, seed: int = 3, turns: int = 20, project: str = "bench"
) -> dict:
    """COPY n synthetic conversational memories into `memories` and their fragments, as ingest writes them.

    Sessions of `turns` turns (the last one shorter), two speakers alternating, each session on one topic
    (a turn drifts to another one now and then). Every memory after the first of its session has its
    `context` (the previous turn, "speaker: words" cut as `store.memories.previous_turn` cuts it), a `turn`
    in session order, and besides its own fragment a `with_context` one (`store.memories.fragment_rows`).
    Vectors: a turn's own fragment is its topic's vector (`topic_vector`), the context fragment the normalised
    mean of the previous turn's and its own, the memory's `avg_embedding` the mean of its own fragments.
    Everything counts as embedded: `embedded_hash` is the memory's `content_hash`, and each fragment's
    `content_hash` (md5 of its indexed text, set by the trigger). The memories' HNSW index and the owner's
    fragment graph are dropped for the load and built afterwards. Timings go to LOADS; returns the counts.
    """
    from memory_pipelines.store.memories import CONTEXT_CHARS, content_hash, fragment_id, fragment_rows
    from memory_pipelines.store.projects import ensure_project
    from memory_pipelines.text.chunks import chunk_text
    from memory_pipelines.text.summary import extractive_summary
    from memory_pipelines.text.summary import tags as extract_tags

    rng = random.Random(seed)
    model = FakeEmbedder(384).model_name
    pool = get_pool(url)
    now = dt.datetime.now(dt.UTC)
    indexes = {"memories_avg_embedding_hnsw": ("memories", "avg_embedding")}
    started = time.perf_counter()
    fragments: list[tuple] = []
    sessions = 0
    with pool.connection() as conn:
        project_id = uuid.UUID(ensure_project(conn, owner, project, project))
        for index in indexes:
            conn.execute(f"DROP INDEX IF EXISTS {index}")
        drop_owner_indexes(conn, "fragments")
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY memories (id, owner_id, project_id, content_type, content, content_hash, ts, speaker,"
                " summary, tags, chunk_count, embedding_status, created_at, updated_at, avg_embedding,"
                " embedding_model, embedded_hash, embedded_at, session, turn, context)"
                " FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["text", "text", "uuid", "text", "text", "text", "int8", "text", "text", "jsonb",
                            "int4", "text", "timestamptz", "timestamptz", "vector", "text", "text",
                            "timestamptz", "text", "int8", "text"])
            turn = 0
            while turn < n:
                sessions += 1
                session, topic = f"s{sessions:05d}", rng.randrange(len(_TOPICS))
                start = now - dt.timedelta(days=rng.random() * 180)
                previous: tuple[str, str, np.ndarray] | None = None
                for i in range(min(turns, n - turn)):
                    turn += 1
                    speaker = SPEAKERS[i % 2]
                    t = topic if rng.random() < 0.85 else rng.randrange(len(_TOPICS))
                    content = note(rng, t)[0]
                    vec = topic_vector(t, rng)
                    created = start + dt.timedelta(minutes=i)
                    context = None
                    if previous is not None:
                        context = f"{previous[0]}: " + " ".join(previous[1].split())[:CONTEXT_CHARS]
                    memory_id = f"mem_{rng.getrandbits(80):020x}"
                    chunks = chunk_text(content)
                    copy.write_row((
                        memory_id, owner, project_id, "insight", content, content_hash(content),
                        int(created.timestamp()), speaker, extractive_summary(content),
                        Jsonb(extract_tags(content)), len(chunks), "done", created, created, vec, model,
                        content_hash(content), now, session, turn, context,
                    ))
                    for chunk_index, chunk, ctx in fragment_rows(chunks, context):
                        v = vec
                        if ctx:
                            v = previous[2] + vec
                            v = v / np.linalg.norm(v)
                        fragments.append((fragment_id(memory_id, ctx, chunk_index), memory_id, owner, chunk_index,
                                          chunk, created, ctx, v, model))
                    previous = (speaker, content, vec)
        conn.execute("SELECT setval('memory_turns', %s)", (max(turn, 1),))
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY fragments (id, memory_id, owner_id, chunk_index, content, ts, with_context, embedding,"
                " embedding_model) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["text", "text", "text", "int4", "text", "timestamptz", "bool", "vector", "text"])
            for row in fragments:
                copy.write_row(row)
        conn.execute("UPDATE fragments SET embedded_hash = content_hash, embedded_at = now()")
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM FULL memories")
        conn.execute("VACUUM FULL fragments")
        conn.autocommit = False
        loaded = time.perf_counter()
        conn.execute(f"SET maintenance_work_mem = '{index_memory(len(fragments))}'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        for index, (table, column) in indexes.items():
            conn.execute(f"CREATE INDEX {index} ON {table} USING hnsw ({column} vector_cosine_ops)")
        conn.commit()
        sync_owner_indexes(conn, 384, tables=["fragments"])
        built = time.perf_counter()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE memories")
        conn.execute("VACUUM ANALYZE fragments")
        conn.autocommit = False
        with_context = sum(1 for f in fragments if f[6])
        log(f"  {n} memories in {sessions} sessions, {len(fragments)} fragments ({with_context} with context):"
            f" COPY + hash in {loaded - started:.0f} s, HNSW indexes in {built - loaded:.0f} s")
    LOADS.append({"table": "memories+fragments", "rows": n, "fragments": len(fragments),
                  "copy_seconds": round(loaded - started, 1), "index_build_seconds": round(built - loaded, 1)})
    return {"memories": n, "sessions": sessions, "fragments": len(fragments), "context_fragments": with_context}


def database_size(url: str) -> str:
    """The scratch database's size on disk, e.g. '3.2 GB'."""
    with get_pool(url).connection() as conn:
        return conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()[0]


def machine() -> dict:
    """The machine a figure was measured on, and how busy it was (1-minute load average)."""
    import os

    return {"cores": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}


def cpu_seconds(procs: list) -> float:
    """User plus system CPU seconds of these psutil processes (one that has exited counts nothing)."""
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    qs = np.percentile(samples_ms, [50, 95, 99])
    return {
        "p50_ms": round(float(qs[0]), 2),
        "p95_ms": round(float(qs[1]), 2),
        "p99_ms": round(float(qs[2]), 2),
        "mean_ms": round(statistics.fmean(samples_ms), 2),
    }


RESULTS = Path(__file__).resolve().parent / "results"


def size_label(n: int) -> str:
    """A row count as result file names carry it: 100000 -> 100k, 1000000 -> 1m."""
    for unit, step in (("m", 1_000_000), ("k", 1_000)):
        if n >= step and n % step == 0:
            return f"{n // step}{unit}"
    return str(n)


def geometry_suffix() -> str:
    """`_isotropic` for results on the isotropic vectors, so they never overwrite the default geometry's."""
    return "_isotropic" if GEOMETRY == "isotropic" else ""


def add_out_argument(parser) -> None:
    """`--out`: where the JSON goes; by default the configuration's current file in bench/results/."""
    parser.add_argument("--out", metavar="PATH", help="write the JSON here (default: the configuration's file in "
                        "bench/results/, which a rerun overwrites; '-': print it only)")


def out_path(arg: str | None, name: str) -> Path | None:
    """The file a run writes: `--out` when given ('-': none), else bench/results/NAME.json."""
    if arg == "-":
        return None
    return Path(arg) if arg else RESULTS / f"{name}.json"


def emit(result: dict, out: Path | None = None) -> None:
    """The benchmark's figures as one JSON object on the last line of stdout, and in `out` when given."""
    line = json.dumps(result, ensure_ascii=False, default=str)
    if out is not None:
        out.write_text(line + "\n", encoding="utf-8")
        log(f"wrote {out}")
    print(line)


@contextmanager
def serve_until_stopped(command: list[str], env: dict[str, str], port: int,
                        logfile: IO[str]) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run a `memory-pipelines serve` command line on loopback `port` and yield (base URL, Popen) once it answers
    /health; stopped with SIGTERM on exit (killed if it has not stopped 60 s later)."""
    import httpx

    proc = subprocess.Popen(command, env=env, stdout=logfile, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}; see {logfile.name}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve did not answer /health in 120 s; see {logfile.name}")
            time.sleep(0.5)
        yield base, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log("serve did not stop within 60 s of SIGTERM; killing it")
            proc.kill()
            proc.wait()


def save_result(out: dict, path: Path) -> None:
    """Add the machine's state after the run, write the figures to `path` (indented JSON) and emit them."""
    out["machine_after"] = machine()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    emit(out)


def pyplot():
    """matplotlib.pyplot on the Agg backend (files, no display), or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_plot(fig, ax, path: Path) -> None:
    """Legend, grid and layout as every bench plot has them, then the PNG."""
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
