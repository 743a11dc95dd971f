"""Running the offline side: the Dagster instance's home, the main job launched through it, status and coverage,
retention of the retrieval log, and export of an owner's store."""
