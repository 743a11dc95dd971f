"""The retrieval log: one row per build, one per scored candidate, the spec's memory_retrieval event,
and feedback on which injected items were used: explicit (the agent names them) or implicit (the agent posts
what it produced; `implicit` decides which items it demonstrably used)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..embeddings.base import EmbeddingError, normalise, to_array
from ..infra.errors import NotFoundError, ValidationError, check_storable
from ..infra.ids import canonical_uuid, is_uuid
from ..vocabulary import FORGOTTEN_PREFIX, MAX_OUTPUT, SOURCES
from . import implicit
from .retrieve import Candidate
from .scoring import PROFILE_SOURCES


def _still_there(conn: psycopg.Connection, owner: str, ranked: Sequence[Candidate]) -> set[tuple[str, str]]:
    """The (source, id) of `ranked` whose rows still exist, each locked FOR KEY SHARE until the log commits.

    A forget or erase that commits after the build read an item scrubs only the log rows already committed; the
    lock makes one that comes later wait for this log (then scrub it), and SKIP LOCKED treats a row a removal
    holds as gone, so the build never waits on a removal nor deadlocks with one.
    """
    ids: dict[str, list[str]] = {}
    for c in ranked:
        ids.setdefault(c.source, []).append(c.id)
    if not ids:
        return set()
    names = sorted(ids)  # one round trip: a locking CTE per source
    ctes = ", ".join(
        f"s{i} AS (SELECT %s AS source, id::text AS id FROM {SOURCES[n].table} WHERE owner_id = %s"
        f" AND id = ANY(%s::{SOURCES[n].id_type}[]) ORDER BY id FOR KEY SHARE SKIP LOCKED)"
        for i, n in enumerate(names))
    union = " UNION ALL ".join(f"SELECT source, id FROM s{i}" for i in range(len(names)))
    params = [p for n in names for p in (n, owner, ids[n])]
    return {(r[0], r[1]) for r in conn.execute(f"WITH {ctes} {union}", params).fetchall()}


def write_log(
    conn: psycopg.Connection,
    *,
    owner: str,
    query: str,
    mode: str,
    budget: int,
    tokens_used: int,
    config_version: int,
    degraded: str | None,
    as_of,
    ranked: Sequence[Candidate],
    injected: dict[tuple[str, str], tuple[int, int | None]],
    injected_sources: list[str],
    randomized: bool = False,
    lines: dict[tuple[str, str], str] | None = None,
    exclude_session: str | None = None,
) -> str:
    """Insert the build, its candidates and the memory_retrieval event; returns the retrieval id.

    `ranked` holds every scored candidate (profile goals included, logged with source okr);
    `injected` maps (source, id) to (position in the block, tokens); the counts of the event follow
    the seed: candidates and injected items exclude the profile. `lines` maps (source, id) to the block line
    the agent was shown (what implicit feedback compares its output with); `exclude_session` the conversation the
    build left out. Each candidate's `features` (`features.candidate_features`: channel scores and ranks,
    neighbour gain, language pair, source, age) go into the same COPY, for the tuner's learned ranker. An item
    removed since the build read it is logged as a forget leaves it (`_still_there`): a stand-in id, no line.

    The caller's transaction commits without waiting for its WAL flush (`synchronous_commit` off, for this
    transaction only): the log is the build's own record, not a write anyone made, and the agent should not
    wait for a disk flush to read its context. It is visible to feedback at once; a server crash can lose
    the builds of its last moments (at most three `wal_writer_delay`s, 0.6 s by default), never a memory.
    """
    conn.execute("SET LOCAL synchronous_commit = off")
    lines = lines or {}
    sources = injected_sources
    candidates_count = sum(1 for c in ranked if c.source not in PROFILE_SOURCES)
    injected_count = len(sources)
    row = conn.execute(
        "INSERT INTO retrievals (owner_id, query, mode, token_budget, token_used, candidates_count,"
        " injected_count, injected_sources, config_version, degraded, randomized, as_of, exclude_session)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id::text",
        (
            owner,
            query,
            mode,
            budget,
            tokens_used,
            candidates_count,
            injected_count,
            Jsonb(sources),
            config_version,
            degraded,
            randomized,
            as_of,
            exclude_session,
        ),
    ).fetchone()
    retrieval_id = row[0]
    present = _still_there(conn, owner, ranked)
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY retrieval_candidates (retrieval_id, owner_id, source, item_id, relevance, age_days, mode, decay,"
            " mode_weight, score, rank, mmr_rank, tokens, injected, line, features) FROM STDIN"
        ) as copy,
    ):
        seen = set()
        for rank, c in enumerate(ranked, start=1):
            if (c.source, c.id) in seen:
                continue
            seen.add((c.source, c.id))
            mmr_rank, tokens = injected.get((c.source, c.id), (None, None))
            kept = (c.source, c.id) in present
            copy.write_row(
                (
                    retrieval_id,
                    owner,
                    c.source,
                    c.id if kept else f"{FORGOTTEN_PREFIX}{uuid.uuid4()}",
                    c.relevance,
                    c.age_days,
                    mode,
                    c.decay,
                    c.mode_weight,
                    c.score,
                    rank,
                    mmr_rank,
                    tokens,
                    (c.source, c.id) in injected,
                    lines.get((c.source, c.id)) if kept else None,
                    None if c.features is None else Jsonb(c.features),
                )
            )
    conn.execute(
        "INSERT INTO events (owner_id, type, payload) VALUES (%s, 'memory_retrieval', %s)",
        (
            owner,
            Jsonb(
                {
                    "retrieval_id": retrieval_id,
                    "query": query[:200],
                    "mode": mode,
                    "candidates_count": candidates_count,
                    "injected_count": injected_count,
                    "injected_sources": sources,
                    "token_used": tokens_used,
                    "token_budget": budget,
                    "degraded": degraded,
                }
            ),
        ),
    )
    return retrieval_id


def _lock_build(conn: psycopg.Connection, owner: str, retrieval_id: str) -> None:
    """Lock the owner's build for its feedback; refused once a prune took its candidates, which were rolled up
    as without feedback (marking it then would count a build with feedback and none of its items)."""
    found = conn.execute("SELECT candidates_pruned_at FROM retrievals WHERE id = %s AND owner_id = %s FOR UPDATE",
                         (retrieval_id, owner)).fetchone()
    if not found:
        raise NotFoundError(f"retrieval {retrieval_id} not found")
    if found[0] is not None:
        raise ValidationError("retrieval_id", f"this build's candidates were pruned by retention on"
                                              f" {found[0]:%Y-%m-%d}: its feedback can no longer be recorded")


def record_feedback(pool: ConnectionPool, owner: str, retrieval_id: str, used_ids: Sequence[str]) -> int:
    """Mark which injected items of one build were used; returns how many were marked.

    The build must belong to `owner` (another owner's build is reported as not found), and every id must be
    one of its injected items (else a ValidationError naming `used_ids`: a typo must not label the build as
    "nothing used"). Explicit feedback wins over implicit: it replaces every injected item's mark, and says so
    (`used_by = 'explicit'`); a repeat gives the same marks. The profile's goals are never marked.
    """
    if not isinstance(used_ids, list | tuple) or not all(isinstance(i, str) for i in used_ids):
        raise ValidationError("used_ids", "must be a list of item ids (strings)")
    if not is_uuid(retrieval_id):
        raise NotFoundError(f"retrieval {retrieval_id} not found")
    retrieval_id = canonical_uuid(retrieval_id)  # the id as logged, whatever case the caller wrote it in
    with pool.connection() as conn, conn.transaction():
        _lock_build(conn, owner, retrieval_id)  # the build first, then its candidates, as implicit feedback does
        shown = {r[0] for r in conn.execute(
            "SELECT item_id FROM retrieval_candidates WHERE retrieval_id = %s AND owner_id = %s AND injected",
            (retrieval_id, owner),
        )}
        unknown = [i for i in used_ids if i not in shown]
        if unknown:
            gone = sum(1 for i in shown if i.startswith(FORGOTTEN_PREFIX))  # a forget scrubs the id from the log
            raise ValidationError("used_ids", f"{unknown[0][:80]!r} is not an item this build injected"
                                              + (f" ({len(unknown)} such ids)" if len(unknown) > 1 else "")
                                              + (f", or it was forgotten since ({gone} of its items"
                                                 f" {'was' if gone == 1 else 'were'}): leave it out" if gone else ""))
        conn.execute(
            "UPDATE retrieval_candidates SET used = (item_id = ANY(%s)), used_by = 'explicit'"
            " WHERE retrieval_id = %s AND owner_id = %s AND injected AND source <> ALL(%s)",
            (list(used_ids), retrieval_id, owner, list(PROFILE_SOURCES)),
        )
        marked = conn.execute(
            "SELECT count(*) FROM retrieval_candidates WHERE retrieval_id = %s AND used", (retrieval_id,)
        ).fetchone()[0]
        conn.execute("UPDATE retrievals SET feedback_at = now() WHERE id = %s", (retrieval_id,))
    return int(marked)




def check_output(output: Any) -> str:
    """The agent's output as posted for implicit feedback: non-blank text of at most MAX_OUTPUT characters."""
    if not isinstance(output, str):
        raise ValidationError("output", "must be text (the answer, summary, diff or tool calls the agent produced)")
    if not output.strip():
        raise ValidationError("output", "must not be empty: post what the agent produced")
    if len(output) > MAX_OUTPUT:
        raise ValidationError("output", f"must be at most {MAX_OUTPUT:,} characters (got {len(output):,}); "
                                        "post the final answer or its summary")
    return check_storable("output", output)


def stored_vectors(
    conn: psycopg.Connection, owner: str, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], np.ndarray]:
    """(source, id) → the item's stored embedding (what search compares with), for the items that have one."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for source in sorted({s for s, _ in keys}):
        spec = SOURCES.get(source)
        if spec is None or not spec.vector_sql:
            continue
        ids = [i for s, i in keys if s == source and (spec.id_type != "uuid" or is_uuid(i))]
        rows = conn.execute(
            f"SELECT t.id::text, {spec.vector_sql} FROM {spec.from_sql or spec.table + ' t'}"
            f" WHERE t.owner_id = %s AND t.id = ANY(%s::{spec.id_type}[]) AND {spec.vector_sql} IS NOT NULL",
            (owner, ids),
        ).fetchall()
        out.update(((source, r[0]), v) for r in rows if (v := to_array(r[1])) is not None)
    return out


def _implicit_evidence(
    embedder: Embedder, query: str, output: str, lines: list[str], vectors: list[np.ndarray | None]
) -> tuple[list[implicit.Evidence], str | None]:
    """Evidence for each injected line against the output. Items are compared by their stored embedding (the
    line is embedded for those without one); semantic scores are None (not measured) when the embedder fails."""
    texts = [implicit.item_text(line) for line in lines]
    chunks = implicit.output_chunks(output)
    out_terms = implicit.output_terms(output)
    missing = [k for k, v in enumerate(vectors) if v is None or len(v) != embedder.dimension]
    item_vecs = [v if v is not None and len(v) == embedder.dimension else None for v in vectors]
    degraded = None
    try:
        chunk_vecs = embedder.embed_on_request(chunks, kind="query")
        if missing:
            vecs = embedder.embed_on_request([texts[k] for k in missing], kind="passage")
            for k, vec in zip(missing, vecs, strict=True):
                item_vecs[k] = vec
    except EmbeddingError as exc:
        degraded = f"semantic overlap skipped, the embedding provider failed ({exc}); lexical overlap only"
        return [implicit.evidence(text, query, out_terms, None, None, []) for text in texts], degraded
    chunk_langs = [implicit.language(c) for c in chunks]
    found = []
    for text, vec in zip(texts, item_vecs, strict=True):
        floors = [embedder.floor_for(lang, implicit.language(text)) for lang in chunk_langs][: len(chunk_vecs)]
        found.append(implicit.evidence(text, query, out_terms, normalise(vec[None, :])[0], chunk_vecs, floors))
    return found, degraded


def record_implicit_feedback(
    pool: ConnectionPool, embedder: Embedder, owner: str, retrieval_id: str, output: Any
) -> dict[str, Any]:
    """Mark the injected items of one build that the agent's `output` demonstrably used (`used_by = 'implicit'`),
    with the evidence on every scored item; returns what was decided.

    Explicit feedback wins: after it, implicit feedback changes nothing. Posting again never unmarks and never
    marks twice (`marked` counts items newly marked). The build must belong to `owner`.
    """
    output = check_output(output)
    if not isinstance(retrieval_id, str) or not is_uuid(retrieval_id):
        raise NotFoundError(f"retrieval {retrieval_id} not found")
    retrieval_id = canonical_uuid(retrieval_id)  # answered as logged, whatever case the caller wrote it in
    with pool.connection() as conn:
        build = conn.execute(
            "SELECT query FROM retrievals WHERE id = %s AND owner_id = %s", (retrieval_id, owner)
        ).fetchone()
        if not build:
            raise NotFoundError(f"retrieval {retrieval_id} not found")
        rows = conn.execute(
            "SELECT source, item_id, line FROM retrieval_candidates"
            " WHERE retrieval_id = %s AND owner_id = %s AND injected AND line IS NOT NULL ORDER BY mmr_rank",
            (retrieval_id, owner),
        ).fetchall()
        vectors = stored_vectors(conn, owner, [(r[0], r[1]) for r in rows])
    found, degraded = _implicit_evidence(embedder, build[0], output, [r[2] for r in rows],
                                         [vectors.get((r[0], r[1])) for r in rows])
    marked = 0
    with pool.connection() as conn, conn.transaction():
        _lock_build(conn, owner, retrieval_id)
        explicit = conn.execute(
            "SELECT count(*) > 0 FROM retrieval_candidates WHERE retrieval_id = %s AND used_by = 'explicit'",
            (retrieval_id,),
        ).fetchone()[0]
        if not explicit:
            for (source, item_id, _line), ev in zip(rows, found, strict=True):
                cur = conn.execute(
                    "UPDATE retrieval_candidates SET evidence = %s,"
                    " used = used OR %s, used_by = CASE WHEN %s THEN 'implicit' ELSE used_by END"
                    " WHERE retrieval_id = %s AND source = %s AND item_id = %s AND NOT used",
                    (Jsonb(ev.as_dict()), ev.used, ev.used, retrieval_id, source, item_id),
                )
                marked += cur.rowcount if ev.used else 0
            conn.execute(
                "UPDATE retrievals SET feedback_at = coalesce(feedback_at, now()),"
                " implicit_at = coalesce(implicit_at, now()) WHERE id = %s",
                (retrieval_id,),
            )
        used = conn.execute(  # the profile's goals are never marked nor counted as injected
            "SELECT source, item_id, used, used_by FROM retrieval_candidates"
            " WHERE retrieval_id = %s AND injected AND source <> ALL(%s) ORDER BY mmr_rank",
            (retrieval_id, list(PROFILE_SOURCES)),
        ).fetchall()
    by_key = {(s, i): ev for (s, i, _l), ev in zip(rows, found, strict=True)}
    return {
        "retrieval_id": retrieval_id,
        "marked": marked,
        "used": sum(1 for r in used if r[2]),
        "explicit_feedback": bool(explicit),
        "threshold": implicit.IMPLICIT_THRESHOLD,
        "degraded": degraded,
        "items": [
            {"source": s, "id": i, "used": u, "used_by": by,
             "evidence": by_key[(s, i)].as_dict() if (s, i) in by_key else None}
            for s, i, u, by in used
        ],
    }
