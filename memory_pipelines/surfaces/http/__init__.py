"""The HTTP surface (FastAPI): progressive search, the agent-mem memory centre, context and feedback.

Install with the `api` extra. `create_app(memory)` builds the app over a `Memory`; `memory-pipelines serve`
runs it.
"""

from .app import create_app

__all__ = ["create_app"]
