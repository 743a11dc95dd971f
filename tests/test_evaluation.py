"""`memory-pipelines eval`: a benchmark folder in, recall per method out; context builds at a real budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.embeddings.cache import CachedEmbedder
from memory_pipelines.evaluation.run import METHODS, compare_runs, evaluate
from memory_pipelines.infra.errors import ValidationError

TOPICS = [
    "the deploy pipeline broke because the staging database password expired",
    "we moved the weekly planning meeting to thursday afternoon",
    "the mobile app crashes when the camera permission is denied",
    "our cat luna learned to open the kitchen door by herself",
    "the invoice export now rounds amounts to two decimals",
    "grandma sent a recipe for dumplings with pork and cabbage",
]

_STEMS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "jasper", "kelp")
_ENDS = ("wood", "stone", "field", "brook", "ridge", "glen", "moor", "vale", "crest", "fen")
FILLER = [f"{a}{b}" for a in _STEMS for b in _ENDS]


def _folder(tmp_path: Path) -> Path:
    """Two owners, 60 memories each (six topics, ten long turns each), one query per topic."""
    memories, queries = [], []
    for owner in ("alice", "bob"):
        for t, topic in enumerate(TOPICS):
            for i in range(10):
                filler = " ".join(FILLER[(i * 11 + j) % len(FILLER)] for j in range(30))  # turns share few words
                memories.append({"id": f"{owner}-{t}-{i}", "owner": owner, "speaker": owner,
                                 "created_at": f"2024-03-{i + 1:02d}T10:00:00", "text": f"{topic}. {filler}"})
            queries.append({"id": f"q-{owner}-{t}", "owner": owner, "query": topic, "category": "single_hop",
                            "gold_ids": [f"{owner}-{t}-{i}" for i in range(3)], "asked_at": "2024-04-01T00:00:00"})
    (tmp_path / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in memories), encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries), encoding="utf-8")
    return tmp_path


def test_a_real_budget_injects_fewer_items_and_hybrid_is_matched_to_them(server_url, tmp_path):
    folder = _folder(tmp_path)
    embedder = FakeEmbedder(384)
    unlimited = evaluate(server_url, embedder, folder)
    tight = evaluate(server_url, embedder, folder, mode="plan", budget=150)
    assert set(unlimited) == set(METHODS) == set(tight)
    assert unlimited["context"]["overall"]["n"] == tight["context"]["overall"]["n"] == len(TOPICS) * 2
    # Search does not depend on the context budget; the context does.
    assert tight["hybrid"] == unlimited["hybrid"]
    assert unlimited["hybrid"]["overall"]["recall@10"] > 0.5
    assert tight["context"]["overall"]["recall@10"] < unlimited["context"]["overall"]["recall@10"]
    # A few long turns fit in 150 tokens: hybrid cut to as many items can be no better than hybrid's top 10.
    assert tight["hybrid_matched"]["overall"]["recall@10"] < tight["hybrid"]["overall"]["recall@10"]


@pytest.mark.parametrize(("kwargs", "field"), [({"mode": "dream"}, "mode"), ({"budget": 10}, "budget"),
                                               ({"budget": 40_000}, "budget")])
def test_bad_mode_or_budget_is_refused_before_any_work(server_url, tmp_path, kwargs, field):
    with pytest.raises(ValidationError) as err:
        evaluate(server_url, FakeEmbedder(384), tmp_path / "absent", **kwargs)
    assert err.value.field == field


def test_cached_embeddings_and_saved_rankings_make_a_rerun_identical_and_comparable(server_url, tmp_path):
    folder = _folder(tmp_path)
    first_inner, second_inner = FakeEmbedder(384), FakeEmbedder(384)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first = evaluate(server_url, CachedEmbedder(first_inner, tmp_path / "cache"), folder, save_rankings=a)
    second = evaluate(server_url, CachedEmbedder(second_inner, tmp_path / "cache"), folder, save_rankings=b)
    assert first_inner.texts_embedded == 120 + len(TOPICS) * 2 - len(TOPICS)  # queries repeat across owners
    assert second_inner.calls == 0 and second == first
    lo, hi = first["hybrid"]["overall"]["recall@10_ci"]
    assert lo <= first["hybrid"]["overall"]["recall@10"] <= hi
    assert first["hybrid"]["overall"]["vs_best_channel"]["recall@10"]["best_channel"] in ("keyword", "semantic")
    rows = [json.loads(line) for line in a.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 12 and set(rows[0]["rankings"]) == set(METHODS)
    assert rows[0]["gold"] == ["alice-0-0", "alice-0-1", "alice-0-2"]
    dataset_ids = {json.loads(line)["id"] for line in (folder / "memories.jsonl").read_text().splitlines()}
    assert all(set(ranked) <= dataset_ids for r in rows for ranked in r["rankings"].values())  # not stored ids
    assert all(i.startswith("alice-0-") for i in rows[0]["rankings"]["hybrid"][:3])
    assert compare_runs(a, b, "hybrid")["overall"] == {"diff": 0.0, "ci": [0.0, 0.0], "a": first["hybrid"]["overall"][
        "recall@10"], "b": first["hybrid"]["overall"]["recall@10"], "n": 12}


def _asked_early(folder: Path, field: dict | None) -> None:
    """Each query of `_folder` also carries `field` (a time under `meta`), or loses its `meta`."""
    path = folder / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r.pop("meta", None)
        if field is not None:
            r["meta"] = field
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")


def test_asked_at_reads_a_query_field_and_nothing_written_later_is_searched(server_url, tmp_path):
    folder = _folder(tmp_path)
    # Asked on 2 March: of each topic's ten turns (written 1 to 10 March) only the first two existed then,
    # so one of the three gold turns (written 3 March) cannot be found and nothing later may be ranked.
    _asked_early(folder, {"orig_time": "2024-03-02T12:00:00"})
    embedder = CachedEmbedder(FakeEmbedder(384), tmp_path / "cache")
    plain = evaluate(server_url, embedder, folder, methods=("hybrid", "context"))
    causal_rankings = tmp_path / "causal.jsonl"
    causal = evaluate(server_url, embedder, folder, methods=("hybrid", "context"), asked_at="meta.orig_time",
                      save_rankings=causal_rankings)
    assert plain["hybrid"]["overall"]["recall@10"] == 1.0
    assert causal["hybrid"]["overall"]["recall@10"] == pytest.approx(2 / 3, abs=1e-4)
    assert causal["context"]["overall"]["recall@10"] == pytest.approx(2 / 3, abs=1e-4)
    rows = [json.loads(line) for line in causal_rankings.read_text(encoding="utf-8").splitlines()]
    days = {int(i.rsplit("-", 1)[1]) for r in rows for ranked in r["rankings"].values() for i in ranked}
    assert days == {0, 1}


def test_a_query_without_the_asked_at_field_is_named_before_any_work(server_url, tmp_path):
    folder = _folder(tmp_path)
    with pytest.raises(ValidationError) as err:
        evaluate(server_url, FakeEmbedder(384), folder, asked_at="meta.orig_time")
    assert err.value.field == "asked_at" and "'q-alice-0'" in str(err.value) and "meta.orig_time" in str(err.value)
    _asked_early(folder, {"orig_time": "the second of March"})
    with pytest.raises(ValidationError) as err:
        evaluate(server_url, FakeEmbedder(384), folder, asked_at="meta.orig_time")
    assert "must be an ISO time" in str(err.value) and "'the second of March'" in str(err.value)


def test_eval_on_the_command_line_takes_asked_at(db_url, tmp_path):
    from tests.test_cli import run_cli

    folder = _folder(tmp_path)
    _asked_early(folder, {"orig_time": "2024-03-02T12:00:00"})
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    proc = run_cli(["eval", str(folder), "--json", "--asked-at", "meta.orig_time"], env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hybrid"]["overall"]["recall@10"] == pytest.approx(2 / 3, abs=1e-4)
    proc = run_cli(["eval", str(folder), "--json", "--asked-at", "meta.asked"], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "asked_at" in proc.stderr and "'q-alice-0'" in proc.stderr and "meta.asked" in proc.stderr
