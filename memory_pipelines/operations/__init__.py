"""Running the offline side: the Dagster instance's home, the main job launched through it, status and coverage."""
