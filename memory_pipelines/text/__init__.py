"""Text utilities: token counting, keywords, chunking."""
