"""Fit the geometry of the bundled model's embeddings, for the synthetic vectors of the benchmarks.

The benchmarks load up to a million synthetic rows; embedding that many texts with the local model would take
a day on a laptop. So they draw vectors from a two-level Gaussian fitted here to real embeddings: the memories
of the two public development sets (`../shared/bench/*/memories.jsonl`) embedded as passages by the bundled
multilingual-e5-small. k-means (k = 50) splits them into topics; the topic centres give the mean and the
between-topic spread, the residuals the within-topic spread. Each spread is kept as its top principal
components plus an isotropic tail holding the rest of its variance.

Why it matters: isotropic noise around random centres (BENCH_GEOMETRY=isotropic) puts every point nearly as far
from its nearest neighbour as from the rest, which no text model produces; real embeddings are anisotropic and
far more structured, and an HNSW graph finds their neighbours far more easily. `python bench/fit_geometry.py
--check` compares them (docs/performance.md has the table).

    python bench/fit_geometry.py [--embedding-cache DIR] [--check]

Writes `bench/data/e5_geometry.npz` (float16, about 100 KB).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "e5_geometry.npz"
DEV_SETS = HERE.parent.parent / "shared" / "bench"
COMPONENTS = 64
TOPICS = 50


def _memories() -> list[str]:
    texts: list[str] = []
    for name in ("locomo_dev", "memorybank_cross_dev"):
        with open(DEV_SETS / name / "memories.jsonl", encoding="utf-8") as fh:
            texts += [json.loads(line)["text"] for line in fh if line.strip()]
    return texts


def embed(texts: list[str], cache: str | None) -> np.ndarray:
    """The texts as passages, by the bundled model (through an embedding cache when given)."""
    from memory_pipelines.embeddings.local import LocalE5Embedder

    embedder = LocalE5Embedder()
    if cache:
        from memory_pipelines.embeddings.cache import CachedEmbedder

        embedder = CachedEmbedder(embedder, cache)
    return np.asarray(embedder.embed(texts, kind="passage"), dtype=np.float32)


def kmeans(x: np.ndarray, k: int, iterations: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Spherical k-means: (centres, label of each row)."""
    rng = np.random.default_rng(seed)
    centres = x[rng.choice(len(x), k, replace=False)].copy()
    for _ in range(iterations):
        labels = np.argmax(x @ centres.T, axis=1)
        for j in range(k):
            members = x[labels == j]
            if len(members):
                centres[j] = members.mean(0)
    return centres, np.argmax(x @ centres.T, axis=1)


def spread(x: np.ndarray, components: int) -> dict[str, np.ndarray]:
    """Top principal directions of centred rows `x`, their standard deviations, and the tail's per-dimension
    standard deviation (the remaining variance spread evenly over the remaining dimensions)."""
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    var = s**2 / max(len(x) - 1, 1)
    tail = var[components:].sum() / (x.shape[1] - components)
    return {"basis": vt[:components], "std": np.sqrt(var[:components]), "tail": np.sqrt(np.array([tail]))}


def fit(vectors: np.ndarray) -> dict[str, np.ndarray]:
    centres, labels = kmeans(vectors, TOPICS)
    mean = vectors.mean(0)
    between = spread(centres - mean, min(COMPONENTS, TOPICS - 1))
    within = spread(vectors - centres[labels], COMPONENTS)
    return {
        "mean": mean,
        **{f"between_{k}": v for k, v in between.items()},
        **{f"within_{k}": v for k, v in within.items()},
    }


def describe(x: np.ndarray) -> dict[str, float]:
    """Cosine-distance structure of a sample: median 1st and 10th nearest-neighbour distance, mean pairwise
    distance, and the participation ratio of its covariance spectrum (an effective dimension)."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    d = 1 - x @ x.T
    np.fill_diagonal(d, np.inf)
    d.sort(axis=1)
    ev = np.linalg.svd(x - x.mean(0), compute_uv=False) ** 2
    ev /= ev.sum()
    return {
        "nn1": round(float(np.median(d[:, 0])), 3),
        "nn10": round(float(np.median(d[:, 9])), 3),
        "mean_distance": round(float(np.mean(d[:, :-1])), 3),
        "participation_ratio": round(float(1 / np.sum(ev**2)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedding-cache", metavar="DIR", help="reuse (and fill) an embedding cache")
    parser.add_argument("--check", action="store_true", help="compare real and synthetic vectors")
    args = parser.parse_args()
    vectors = embed(_memories(), args.embedding_cache)
    if not args.check:
        OUT.parent.mkdir(exist_ok=True)
        np.savez_compressed(OUT, **{k: v.astype(np.float16) for k, v in fit(vectors).items()})
        print(f"wrote {OUT} from {len(vectors)} embeddings")
    import sys

    sys.path.insert(0, str(HERE))
    from _common import note, topic_vector

    rng = random.Random(3)
    synthetic = np.array([topic_vector(note(rng)[1], rng) for _ in range(len(vectors))])
    print("real     ", describe(vectors))
    print("synthetic", describe(synthetic))


if __name__ == "__main__":
    main()
