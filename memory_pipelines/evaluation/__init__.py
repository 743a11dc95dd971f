"""Retrieval evaluation on labelled datasets (`run`) and its statistics (`stats`). Offline only."""
