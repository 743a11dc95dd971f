"""The context builder (seed 001): retrieval, scoring, MMR, token budget, and the retrieval log."""
