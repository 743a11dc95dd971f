"""What every route depends on: the app's `Memory` and the owner of the request's API key.

`create_app` puts the `Memory` (and the ingest defaults) on `app.state`; routes take them as FastAPI
dependencies, so a router is a plain module that any app can include.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...face import Memory
from ...infra.errors import ValidationError
from .errors import Unauthorized

_bearer = HTTPBearer(auto_error=False, description="A key from `memory-pipelines keys create --owner O`.")


def get_memory(request: Request) -> Memory:
    """The `Memory` the app serves."""
    return request.app.state.memory


MemoryDep = Annotated[Memory, Depends(get_memory)]


def same_owner(given: str | None, owner: str) -> None:
    """An `owner_id` in a request may only name the key's own owner."""
    if given is not None and given != owner:
        raise ValidationError("owner_id", "the owner comes from the API key; omit owner_id")


def current_owner(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    memory: MemoryDep,
) -> str:
    """The owner of the request's bearer key; 401 without a usable one."""
    if creds is None or not creds.credentials:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`; create one with "
                           "`memory-pipelines keys create --owner <owner>`")
    owner = memory.owner_of_key(creds.credentials)
    if owner is None:
        raise Unauthorized("unknown or revoked API key")
    same_owner(request.query_params.get("owner_id"), owner)
    return owner


Owner = Annotated[str, Depends(current_owner)]
