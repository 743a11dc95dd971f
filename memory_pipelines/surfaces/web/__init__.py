"""A small web view of one owner's memory: recent context builds with their items, scores and used marks; hit
rates per day; search with progressive disclosure (summary → detail → related).

Three static files, no build step, nothing from a CDN. The page asks for an API key, keeps it in
sessionStorage and calls the HTTP API's JSON endpoints with `Authorization: Bearer <key>`, so it sees exactly
what the key's owner may see. The HTTP surface serves it at `/ui/`.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
"""index.html, app.js, style.css."""

INDEX_HTML = STATIC_DIR / "index.html"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page loads its script, style and data from the serving origin only."""

__all__ = ["STATIC_DIR", "INDEX_HTML", "CONTENT_SECURITY_POLICY"]
