"""Offline tuning of half-lives and mode weights from the retrieval log (context-builder spec, phase 3.3).

Pure logic (frames in, dicts out) lives in `fit`, `evaluate`, `report`, `simulate`; database I/O only in
`frames.load_log`, `simulate.write_log_rows` and `publish`. The whole loop in one call:
`memory_pipelines.tuning.run.tune_and_evaluate(candidates, builds, train_mask, test_mask, active)`.
Offline only: the online side (context, store) never imports it. Nothing is imported here.
"""
