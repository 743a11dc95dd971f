"""The pages the server serves besides the JSON API, with nothing loaded from elsewhere: the API docs (`/docs`
Swagger UI, `/redoc` ReDoc; their scripts and styles ship in the `fastapi-offline` package) and the web view of
memory (`/ui/`, three static files in `surfaces/web`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from .. import web


def _docs_assets() -> Path | None:
    """The folder of Swagger UI's and ReDoc's scripts and styles from the `fastapi-offline` package."""
    try:
        from importlib.resources import files

        folder = Path(str(files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None
    needed = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
    return folder if all((folder / n).is_file() for n in needed) else None


# The docs pages may load from this server only (should a bundle still name another host, the browser refuses
# it). Their HTML starts the UI with an inline script.
_DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
             "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
             "base-uri 'none'; frame-ancestors 'none'")


def _redoc_bundle(path: Path) -> bytes:
    """ReDoc's standalone bundle without its one outside load: the sidebar's "API docs by Redocly" logo comes
    from a CDN; given an empty data: URL instead, the image fails at once and ReDoc leaves it out."""
    return path.read_bytes().replace(b"https://cdn.redoc.ly/redoc/logo-mini.svg", b"data:,")


def install_docs(app: FastAPI) -> None:
    """/docs and /redoc from files this server serves itself (no CDN), under /static/docs."""
    assets = _docs_assets()
    missing = PlainTextResponse("the offline API docs need the fastapi-offline package: "
                                "pip install 'memory-pipelines[api]'; /openapi.json is served", status_code=503)
    if assets is not None:
        redoc_js = _redoc_bundle(assets / "redoc.standalone.js")

        @app.get("/static/docs/redoc.standalone.js", include_in_schema=False)
        def redoc_bundle() -> Response:  # before the mount: this one path is served patched
            return Response(redoc_js, media_type="text/javascript; charset=utf-8",
                            headers={"Cache-Control": "public, max-age=3600"})

        app.mount("/static/docs", StaticFiles(directory=assets), name="docs-static")

    def page(request: Request, render: Callable[[str], HTMLResponse]) -> HTMLResponse:
        """A docs page rendered with the request's root path, loading nothing but this server's files."""
        if assets is None:
            return missing
        out = render(request.scope.get("root_path", ""))
        out.headers["Content-Security-Policy"] = _DOCS_CSP
        return out

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        return page(request, lambda root: get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} · API docs",
            swagger_js_url=f"{root}/static/docs/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/static/docs/swagger-ui.css",
            swagger_favicon_url=f"{root}/static/docs/favicon.png",
            swagger_ui_parameters={"persistAuthorization": False,  # a key lives as long as the tab, as in the web view
                                   "validatorUrl": None,
                                   "displayRequestDuration": True, "tryItOutEnabled": False},
        ))

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        return page(request, lambda root: get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} · ReDoc",
            redoc_js_url=f"{root}/static/docs/redoc.standalone.js",
            redoc_favicon_url=f"{root}/static/docs/favicon.png", with_google_fonts=False,
        ))


def install_web_view(app: FastAPI) -> None:
    """The web view of memory at /ui/ (its data comes from the JSON endpoints, with the key)."""
    app.mount("/ui/static", StaticFiles(directory=web.STATIC_DIR), name="web-static")

    @app.get("/", include_in_schema=False)
    @app.get("/ui", include_in_schema=False)
    def ui_redirect(request: Request) -> RedirectResponse:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/ui/")

    @app.get("/ui/", include_in_schema=False)
    def ui() -> FileResponse:
        return FileResponse(web.INDEX_HTML, media_type="text/html", headers={
            "Content-Security-Policy": web.CONTENT_SECURITY_POLICY, "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})
