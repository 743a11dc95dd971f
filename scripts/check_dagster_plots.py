"""Check that the tuning plots render in the Dagster UI, end to end.

Starts the UI as `make dagster` does (`python -m memory_pipelines.operations.dagster_home dagster dev -w
workspace.yaml`) on a free port, waits until it answers, asks its GraphQL API which assets' latest
materialisation carries Markdown `plot_*` metadata (`make run` materialises the tuning group), then, with
Playwright driving headless Chromium, opens each such asset's page, clicks `[Show Markdown]` on every plot
row and checks the dialog holds an <img> that decodes (naturalWidth > 0). Saves one screenshot per asset
(its first plot open) and stops the UI with SIGINT, as Ctrl-C would.

    python scripts/check_dagster_plots.py [--url http://127.0.0.1:3000] [--out docs/images]

--url checks a UI already running instead of starting one. Exit status 1 when a plot does not render or no
asset has plots. Chromium: /usr/bin/chromium (Debian's `chromium`), or $CHROMIUM; never downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERY = """{ assetsOrError { ... on AssetConnection { nodes { key { path }
  assetMaterializations(limit: 1) { runId metadataEntries { label __typename } } } } } }"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(port: int) -> subprocess.Popen:
    dagster = Path(sys.executable).parent / "dagster"
    cmd = [sys.executable, "-m", "memory_pipelines.operations.dagster_home",
           str(dagster), "dev", "-w", "workspace.yaml", "-p", str(port)]
    print("starting:", " ".join(cmd), flush=True)
    # own process group: SIGINT reaches dagster dev and the webserver, daemon and code server it started
    return subprocess.Popen(cmd, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_ui(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"dagster dev stopped (exit {proc.returncode})")


def wait_ready(url: str, proc: subprocess.Popen | None, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"dagster dev exited early (status {proc.returncode})")
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=5) as r:
                print("UI ready:", r.read().decode(), flush=True)
                return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"the UI did not answer at {url} within {timeout:.0f} s")


def assets_with_plots(url: str) -> dict[str, list[str]]:
    """Asset page path -> the Markdown `plot_*` keys of its latest materialisation."""
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": QUERY}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        nodes = json.load(r)["data"]["assetsOrError"]["nodes"]
    out = {}
    for n in nodes:
        for m in n["assetMaterializations"]:
            keys = [e["label"] for e in m["metadataEntries"]
                    if e["label"].startswith("plot_") and e["__typename"] == "MarkdownMetadataEntry"]
            if keys:
                out["/".join(n["key"]["path"])] = keys
    return out


def check(url: str, plots: dict[str, list[str]], out_dir: Path) -> bool:
    from playwright.sync_api import sync_playwright

    ok = True
    out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for asset, keys in plots.items():
            page.goto(f"{url}/assets/{asset}", wait_until="networkidle")
            print(f"{asset}: {len(keys)} plot(s) in the latest materialisation: {', '.join(keys)}")
            for i, key in enumerate(keys):
                skip = page.get_by_role("button", name="Skip")  # the first-visit "Join the community" dialog
                if skip.count():
                    skip.click()
                first_cell = page.locator("td:first-child", has_text=re.compile(f"^{re.escape(key)}$"))
                row = page.locator("tr", has=first_cell).first
                row.get_by_text("[Show Markdown]").click()
                dialog = page.locator(".bp5-dialog", has_text=key)
                img = dialog.locator("img").first
                try:
                    img.wait_for(timeout=15_000)
                    w, h = img.evaluate("e => e.decode().then(() => [e.naturalWidth, e.naturalHeight],"
                                        " () => [0, 0])")
                except Exception as exc:  # no <img>: the Markdown was shown as text or stripped
                    w = h = 0
                    print(f"  {key}: no image in the dialog ({type(exc).__name__})")
                rendered = w > 0 and h > 0
                ok &= rendered
                print(f"  {key}: {'rendered' if rendered else 'NOT rendered'} ({w}x{h} px)")
                if i == 0:
                    page.locator(".bp5-overlay-enter-done .bp5-dialog").wait_for()  # fade-in finished
                    shot = out_dir / f"dagster_{asset.replace('/', '_')}_plot.png"
                    page.screenshot(path=str(shot))
                    print(f"  screenshot: {shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot}")
                dialog.get_by_role("button", name="Close").click()
                dialog.wait_for(state="detached")
        browser.close()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a UI already running (default: start `dagster dev` on a free port)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="screenshot folder")
    args = ap.parse_args()
    # a shell's background job starts with SIGINT ignored, and dagster dev (which maps SIGTERM to SIGINT's
    # handler) would inherit that and ignore both: a handler here is reset to the default in the children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    proc = None
    url = args.url.rstrip("/") if args.url else None
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_ui(port)
    try:
        wait_ready(url, proc)
        plots = assets_with_plots(url)
        if not plots:
            print("no asset has plot_ metadata: materialise the tuning group first (`make run`)")
            return 1
        ok = check(url, plots, args.out.resolve())
    finally:
        if proc is not None:
            stop_ui(proc)
    print("all plots render" if ok else "some plots do not render")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
