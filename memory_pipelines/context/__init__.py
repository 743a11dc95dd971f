"""The context builder (the context-builder spec): retrieval, scoring, MMR, token budget, and the retrieval log."""
