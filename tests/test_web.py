"""The web view and the API docs in a real browser: Debian's Chromium driven by Playwright, against the real API
(uvicorn on loopback) over a real database.

Chromium is the system one (`/usr/bin/chromium`, `apt-get install -y chromium`); browsers are never downloaded.
Every request a page makes is recorded: all of them must go to the local server (no CDN, no fonts, nothing else).

`MEMORY_PIPELINES_SCREENSHOT=docs/web-view.png pytest tests/test_web.py` also writes the web view's screenshot in docs/.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ModuleNotFoundError:  # the browser fixture fails with the fix
    expect = None

from memory_pipelines import Memory
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.auth import create_key
from memory_pipelines.surfaces.http import create_app
from tests.factories import add_learning, add_task
from tests.test_api import LiveServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 30_000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a browser and a server per test


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Chromium from Debian through Playwright; fails (never skips) when either is missing."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests need Debian's Chromium. Install it with "
                    "`apt-get update && apt-get install -y chromium` (`make test` does this when it is missing).")
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        pytest.fail("the `playwright` package is missing: pip install -e '.[dev]' (never run `playwright "
                    "install`: the tests use the system Chromium)")
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """A fresh browser page that records every request it makes."""

    def __init__(self, browser, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US",
                                           timezone_id="UTC")
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.base = base
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda req: self.requests.append(req.url))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.console: list[str] = []
        self.page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))

    def foreign(self) -> list[str]:
        """Requests to anywhere but the local server (data: and blob: URLs stay in the page), and loads the
        page's Content-Security-Policy refused (a request that was attempted all the same)."""
        local = urlsplit(self.base).netloc
        return [u for u in self.requests
                if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != local] + \
            [m for m in self.console if "Content Security Policy" in m]

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page_of(browser) -> Iterator:
    pages: list[Page] = []

    def make(base: str) -> Page:
        pages.append(Page(browser, base))
        return pages[-1]

    yield make
    for p in pages:
        p.close()


ZH = "我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。"
EN = "The login page keeps the session cookie for 30 days so users stay signed in across subdomains."
QUERIES = [  # (query, mode, days ago, feedback: how many of the injected items were used; None: no feedback)
    ("why did we pick pgvector for vectors?", "plan", 2, 1),
    ("login cookie across subdomains", "debug", 1, 0),
    ("pgvector HNSW 索引", "execute", 0, None),
    ("fix the login cookie bug", "debug", 0, 2),  # the newest: more candidates clear the floor than fit 120 tokens
]
LEFT_OUT = "standup-2026-11-30"


def _seed(runtime, url: str) -> dict:
    """Alice's memory through the real API: memories, tasks, learnings, context builds, feedback."""
    key = create_key(runtime.pool, "alice", name="browser")[1]
    bob_key = create_key(runtime.pool, "bob", name="browser")[1]
    c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    for content, ctype, project, speaker in (
        (ZH, "development", "agent-mem", "李雷"),
        (EN, "requirement", "web-app", None),
        ("Deploys go out on Tuesdays after the cookie migration passes its smoke tests.", "plan", "web-app", None),
    ):
        body = {"project_name": project, "content_type": ctype, "content": content}
        if speaker:
            body["speaker"] = speaker
        assert c.post("/ingest/memory", json=body).status_code == 200
    with runtime.pool.connection() as conn:
        task = add_task(conn, "alice", "feat(auth): cross-subdomain cookie auth",
                        "用 cookie 替代 localStorage 保存登录态, so the session survives subdomains",
                        metadata={"repo": "web-app", "pr_number": 6})
        add_task(conn, "alice", "fix(auth): cookie domain for subdomains", "set Domain=.example.com on the cookie")
        add_learning(conn, "alice", "cookie auth needs SameSite=None", "cross-subdomain cookie auth pitfalls")
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    bob = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {bob_key}"}, timeout=60)
    assert bob.post("/api/brain/memory/context", json={"query": "bob's own question"}).status_code == 200

    builds = []
    for query, mode, days_ago, n_used in QUERIES:
        body = {"query": query, "mode": mode, "tokenBudget": 120}
        if mode == "execute":  # one build names the conversation it is part of; the view shows it
            body["exclude_session"] = LEFT_OUT
        ctx = c.post("/api/brain/memory/context", json=body).json()
        assert ctx["items"], query
        used = [i["id"] for i in ctx["items"][:n_used]] if n_used is not None else None
        if used is not None:
            r = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": used})
            assert r.status_code == 200 and r.json()["marked"] == len(used)
        with runtime.pool.connection() as conn:  # spread the builds over days, as a week of use would
            conn.execute("UPDATE retrievals SET created_at = created_at - make_interval(days => %s) WHERE id = %s",
                         (days_ago, ctx["retrieval_id"]))
        builds.append({"id": ctx["retrieval_id"], "query": query, "items": [i["id"] for i in ctx["items"]],
                       "used": used, "days_ago": days_ago, "left_out": body.get("exclude_session")})
        time.sleep(0.01)
    return {"key": key, "bob_key": bob_key, "task": task, "builds": builds}


@pytest.fixture
def served(runtime) -> Iterator[tuple[str, dict]]:
    with LiveServer(create_app(Memory(runtime, llm=None))) as srv:
        yield srv.url, _seed(runtime, srv.url)


def _login(p: Page, key: str, *, load: bool = True) -> None:
    """Opens the key's memory; `load=False` logs in on the page as it is (what runs in it keeps running)."""
    if load:
        p.page.goto(f"{p.base}/ui/")
    p.page.fill("#key", key)
    p.page.click("#login-form button[type=submit]")
    p.page.wait_for_selector("#app:not([hidden]) article.build")
    p.page.wait_for_selector("#chart .day")


def test_web_view_shows_builds_used_marks_hit_rates_and_search(served, page_of):
    url, data = served
    p = page_of(url)
    p.page.goto(f"{url}/")  # the root leads to the view
    assert p.page.url == f"{url}/ui/"
    assert p.page.is_visible("#login") and not p.page.is_visible("#app")

    p.page.fill("#key", "mp_not_a_real_key")
    p.page.click("#login-form button[type=submit]")
    expect(p.page.locator("#login-error")).to_contain_text("not accepted")
    assert "not accepted" in p.page.inner_text("#login-error") and not p.page.is_visible("#app")

    _login(p, data["key"])
    assert p.page.inner_text("#who") == "memory of alice"
    assert p.page.evaluate("sessionStorage.getItem('memory_pipelines.key')") == data["key"]

    # The builds, newest first (bob's build is not among them), with their items and used marks.
    cards = p.page.locator("article.build")
    expected = sorted(reversed(data["builds"]), key=lambda b: b["days_ago"])  # newest first
    assert cards.evaluate_all("cards => cards.map(c => c.dataset.id)") == [b["id"] for b in expected]
    for b in data["builds"]:
        card = p.page.locator(f"article.build[data-id='{b['id']}']")
        assert b["query"] in card.locator(".query").inner_text()
        rows = card.locator("tr.item")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == b["items"]
        used_rows = card.locator("tr.item.used").evaluate_all("rs => rs.map(r => r.dataset.id)")
        assert used_rows == (b["used"] or [])
        assert card.locator("tr.item.used .used-mark").count() == len(b["used"] or [])
        counted = card.locator(".used-count").inner_text()
        assert counted == ("no feedback" if b["used"] is None else f"{len(b['used'])} used")
        assert all(s.replace(".", "").isdigit() for s in card.locator("td.score").all_inner_texts())
        left = card.locator(".left-out")
        assert left.all_inner_texts() == ([f" · conversation left out: {b['left_out']}"] if b["left_out"] else [])

    # All scored candidates of one build, on demand.
    first = p.page.locator(f"article.build[data-id='{expected[0]['id']}']")
    first.locator("button.more-items").click()
    first.locator("button.more-items").wait_for(state="detached")
    everything = httpx.get(f"{url}/api/brain/memory/builds/{expected[0]['id']}",
                           headers={"Authorization": f"Bearer {data['key']}"}).json()["items"]
    assert first.locator("tr.item").evaluate_all("rs => rs.map(r => r.dataset.id)") == [i["id"] for i in everything]
    assert first.locator("tr.item.skipped").count() == len(everything) - len(expected[0]["items"]) > 0

    # Hit rates: 3 of (items injected into the builds with feedback) used, one bar per day, per source.
    injected = sum(len(b["items"]) for b in data["builds"] if b["used"] is not None)
    used = sum(len(b["used"]) for b in data["builds"] if b["used"] is not None)
    total = p.page.inner_text("#hit-total")
    assert p.page.inner_text("#hit-rate") == f"{round(100 * used / injected)}%"
    assert f"({used} of {injected})" in total and "in 3 builds with feedback" in total and "4 builds" in total
    days = p.page.locator("#chart .day")
    assert days.count() == 30
    rates = days.evaluate_all("ds => ds.map(d => d.dataset.rate)")
    want = [""] * 30  # oldest first; a day without feedback has no rate
    for age in {b["days_ago"] for b in data["builds"]}:
        fed = [b for b in data["builds"] if b["days_ago"] == age and b["used"] is not None]
        if fed:
            want[29 - age] = sum(len(b["used"]) for b in fed) / sum(len(b["items"]) for b in fed)
    assert [float(r) if r else "" for r in rates] == [pytest.approx(w, abs=1e-4) if w != "" else "" for w in want]
    assert p.page.locator("#by-source tbody tr").count() >= 1
    p.page.select_option("#days", "7")
    expect(p.page.locator("#chart .day")).to_have_count(7)

    # Search → detail → related → detail of a related match.
    p.page.fill("#q", "cookie auth subdomains")
    p.page.click("#search-form button[type=submit]")
    p.page.wait_for_selector("#results li.match")
    match = p.page.locator(f"#results li.match[data-id='{data['task']}']")
    assert match.count() == 1, p.page.inner_text("#results")
    assert "feat(auth): cross-subdomain cookie auth" in match.inner_text()
    match.locator("button.match-title").click()
    p.page.wait_for_selector(f"#detail .detail-title[data-id='{data['task']}']")
    assert "localStorage" in p.page.inner_text("#detail .body")
    assert "pr_number" in p.page.inner_text("#detail dl")
    p.page.click("#related-button")
    p.page.wait_for_selector("#related li.match")
    related = p.page.locator("#related li.match").evaluate_all("ls => ls.map(l => l.dataset.id)")
    assert related and data["task"] not in related
    p.page.locator("#related li.match button.match-title").first.click()
    p.page.wait_for_selector(f"#detail .detail-title[data-id='{related[0]}']")
    assert "→" in p.page.inner_text("#detail .trail")  # the path taken: task → related item

    shot = os.environ.get("MEMORY_PIPELINES_SCREENSHOT")
    if shot:
        p.page.select_option("#days", "30")
        expect(p.page.locator("#chart .day")).to_have_count(30)
        p.page.click("#related-button")
        p.page.wait_for_selector("#related li.match")
        p.page.screenshot(path=shot, full_page=True)

    # A failed search shows its error; the next action clears it.
    p.page.fill("#q", "   ")
    p.page.click("#search-form button[type=submit]")
    expect(p.page.locator("#search-error")).to_contain_text("422")
    p.page.fill("#q", "cookie auth subdomains")
    p.page.click("#search-form button[type=submit]")
    expect(p.page.locator("#search-note")).to_contain_text("matches")
    expect(p.page.locator("#search-error")).to_have_text("")

    # Forget the key: back to the login, nothing kept, and nothing of alice's left for the next key.
    p.page.click("#forget")
    assert p.page.is_visible("#login") and p.page.evaluate("sessionStorage.length") == 0
    _login(p, data["bob_key"], load=False)
    assert p.page.inner_text("#who") == "memory of bob"
    for part in ("#results", "#related", "#search-note", "#search-error", "#detail .detail-title"):
        assert p.page.locator(part).all_inner_texts() in ([], [""]), part
    assert p.page.input_value("#q") == ""
    assert data["task"] not in p.page.content() and "cookie" not in p.page.inner_text("#app")
    assert "bob's own question" in p.page.inner_text("#builds")

    assert p.errors == []
    assert p.foreign() == [], p.foreign()
    assert f"{url}/ui/static/app.js" in p.requests and any("/api/brain/memory/builds" in u for u in p.requests)


def test_web_view_is_same_auth_and_loads_nothing_from_elsewhere(served, page_of):
    url, _data = served
    page = httpx.get(f"{url}/ui/")
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, no fonts
    for asset in ("app.js", "style.css"):
        r = httpx.get(f"{url}/ui/static/{asset}")
        assert r.status_code == 200 and "http://" not in r.text and "https://" not in r.text
    # The page holds no data: every data endpoint it calls needs the key.
    for path in ("/whoami", "/api/brain/memory/builds", "/api/brain/memory/hit-rates"):
        assert httpx.get(f"{url}{path}").status_code == 401


def test_swagger_ui_and_redoc_render_offline_and_try_it_out_works(served, page_of):
    url, data = served
    spec = httpx.get(f"{url}/openapi.json").json()
    operations = sum(len(ops) for ops in spec["paths"].values())

    docs = page_of(url)
    docs.page.goto(f"{url}/docs")
    docs.page.wait_for_selector(".swagger-ui .information-container .title")
    assert "memory_pipelines" in docs.page.inner_text(".swagger-ui .information-container .title")
    expect(docs.page.locator(".swagger-ui .opblock")).to_have_count(operations)

    # Authorize with the key, then "Try it out" each POST example as written: no owner_id, and it succeeds.
    docs.page.click(".swagger-ui button.authorize")
    docs.page.fill(".swagger-ui .modal-ux input[type=text], .swagger-ui .modal-ux input[type=password]",
                   data["key"])
    docs.page.click(".swagger-ui .modal-ux .auth-btn-wrapper button.authorize")
    docs.page.click(".swagger-ui .modal-ux button.btn-done")
    for op_id, path in (("memory_search", "/api/brain/memory/search"),
                        ("memory_context", "/api/brain/memory/context"),
                        ("ingest", "/ingest/memory")):
        block = docs.page.locator(f".swagger-ui .opblock-post:has(.opblock-summary-path[data-path='{path}'])")
        block.locator(".opblock-summary").click()
        block.locator("button.try-out__btn").click()
        example = json.loads(block.locator("textarea.body-param__text").input_value())
        assert "owner_id" not in example, (op_id, example)
        block.locator("button.execute").click()
        status = block.locator(".live-responses-table tbody .response-col_status").first
        status.wait_for()
        assert status.inner_text().strip().startswith("200"), block.locator(".live-responses-table").inner_text()
    assert docs.errors == []
    assert docs.foreign() == [], docs.foreign()
    assert f"{url}/static/docs/swagger-ui-bundle.js" in docs.requests

    redoc = page_of(url)
    redoc.page.goto(f"{url}/redoc")
    redoc.page.wait_for_selector("h1:has-text('memory_pipelines')")
    redoc.page.wait_for_selector("h2:has-text('Token-budgeted memory context')")
    assert redoc.page.locator("[data-section-id^='tag/']").count() >= 4
    assert redoc.errors == []
    assert redoc.foreign() == [], redoc.foreign()
    assert f"{url}/static/docs/redoc.standalone.js" in redoc.requests



def test_a_refused_search_names_the_field_in_words_and_drops_the_previous_results(served, page_of):
    """A blank or over-long query showed the API's 422 body as raw JSON (`422: [{"loc":["body","query"],...}]`)
    under the matches of the query before it."""
    url, data = served
    p = page_of(url)
    _login(p, data["key"])
    p.page.fill("#q", "cookie auth subdomains")
    p.page.click("#search-form button[type=submit]")
    p.page.wait_for_selector("#results li.match")

    for query, said in (("   ", "422: query: must not be blank"),
                        ("x" * 2001, "422: query: String should have at most 2000 characters")):
        p.page.fill("#q", query)
        p.page.click("#search-form button[type=submit]")
        expect(p.page.locator("#search-error")).to_have_text(said)
        assert p.page.locator("#results li").count() == 0 and p.page.inner_text("#search-note") == ""
    assert p.errors == []


def test_the_export_button_downloads_the_keys_owners_items_and_memories(served, page_of):
    url, data = served
    p = page_of(url)
    p.page.goto(f"{url}/ui/")
    assert not p.page.is_visible("#export")  # no key, no button
    _login(p, data["key"])
    with p.page.expect_download() as info:
        p.page.click("#export")
    download = info.value
    assert download.suggested_filename == "alice-export.jsonl"
    text = Path(download.path()).read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    assert sorted(r["source"] for r in rows) == ["learning", "memory", "memory", "memory", "task", "task"], rows
    assert "bob" not in text and any(r.get("content") == ZH for r in rows)
    assert p.page.inner_text("#error") == "" and p.errors == [] and p.foreign() == []

    p.page.click("#forget")
    assert not p.page.is_visible("#export")


# -- a real browser against a slow, a failing or a narrow world ------------------------------------------------

class Held:
    """Requests the page makes that `hold(url, method, body)` picks, held as a slow server would hold them
    until `release()` lets them through; the others pass."""

    def __init__(self, p: Page, hold) -> None:
        self.page, self.hold, self.routes, self.holding = p.page, hold, [], True
        self.page.route("**/*", self._route)

    def _route(self, route) -> None:
        req = route.request
        if self.holding and self.hold(req.url, req.method, req.post_data or ""):
            self.routes.append(route)
        else:
            route.continue_()

    def wait_for(self, n: int) -> None:
        """Until `n` requests are held (the route handler runs as the test waits on the page)."""
        for _ in range(200):
            if len(self.routes) >= n:
                return
            self.page.wait_for_timeout(25)
        raise AssertionError(f"{len(self.routes)} requests held, not {n}")

    def release(self) -> None:
        """Lets every held request through and waits until the page has had their replies."""
        self.holding = False
        for route in self.routes:
            route.continue_()
        for route in self.routes:
            route.request.response().finished()
        self.page.wait_for_timeout(300)  # the page's own promise chain after the reply (no event to wait on)


def _add_builds(url: str, key: str, n: int) -> None:
    """`n` more context builds for the key's owner (the view pages builds by 10)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for i in range(n):
            assert c.post("/api/brain/memory/context", json={"query": f"older question {i}"}).status_code == 200


def _search(p: Page, query: str) -> None:
    p.page.fill("#q", query)
    p.page.click("#search-form button[type=submit]")
    expect(p.page.locator("#search-note")).to_contain_text("matches")


def _ids(p: Page, selector: str) -> list[str]:
    return p.page.locator(selector).evaluate_all("els => els.map(e => e.dataset.id)")


def test_replies_to_the_key_before_are_dropped_after_forget_key(served, page_of):
    """Alice's slow detail and her older builds page, answered after Forget key and bob's login, were drawn
    under "memory of bob"."""
    url, data = served
    _add_builds(url, data["key"], 7)  # 11 builds: an older page
    p = page_of(url)
    _login(p, data["key"])
    _search(p, "cookie auth subdomains")
    held = Held(p, lambda u, m, b: "/detail/" in u or "cursor=" in u)
    p.page.locator(f"#results li.match[data-id='{data['task']}'] button.match-title").click()
    p.page.click("#more")
    held.wait_for(2)
    p.page.click("#forget")
    _login(p, data["bob_key"], load=False)
    held.release()
    assert p.page.inner_text("#who") == "memory of bob"
    assert p.page.locator("#detail .detail-title").count() == 0
    assert len(_ids(p, "article.build")) == 1 and "cookie" not in p.page.inner_text("#app")
    assert p.errors == []


def test_the_latest_search_wins_and_older_builds_load_once(served, page_of):
    """A slow search answered after a quick one drew its matches under the quick one's query; a double click on
    Older builds loaded the same page twice."""
    url, data = served
    _add_builds(url, data["key"], 7)
    p = page_of(url)
    _login(p, data["key"])
    held = Held(p, lambda u, m, b: u.endswith("/search") and "pgvector" in b)
    p.page.fill("#q", "pgvector")
    p.page.click("#search-form button[type=submit]")
    held.wait_for(1)
    _search(p, "cookie auth subdomains")  # a changed query may be sent while the first still runs
    quick = _ids(p, "#results li.match")
    assert data["task"] in quick
    held.release()
    assert _ids(p, "#results li.match") == quick and p.page.input_value("#q") == "cookie auth subdomains"
    assert p.page.inner_text("#search-note") == f"{len(quick)} matches"

    held = Held(p, lambda u, m, b: "cursor=" in u)
    p.page.click("#more")
    held.wait_for(1)
    expect(p.page.locator("#more")).to_be_disabled()
    p.page.click("#more", force=True)  # the second click of a double click (a disabled button ignores it)
    p.page.wait_for_timeout(200)  # time for a second request, if the click sends one
    held.release()
    ids = _ids(p, "article.build")
    assert len(ids) == len(set(ids)) == 11 and p.page.is_hidden("#more")
    # the button is hidden now: focus goes to where the older builds start
    assert p.page.evaluate("document.activeElement.closest('article.build')?.dataset.id") == ids[10]
    assert p.errors == []


def test_a_failed_login_says_why_under_the_key_and_keeps_no_key(served, page_of):
    """With the server unreachable or a key holding non-ASCII characters, the message went to the hidden main
    view and the key was stored all the same."""
    url, data = served
    p = page_of(url)
    p.page.goto(f"{url}/ui/")
    p.page.route("**/whoami", lambda route: route.abort("connectionrefused"))
    p.page.fill("#key", data["key"])
    p.page.press("#key", "Enter")
    expect(p.page.locator("#login-error")).to_have_text("the server could not be reached")
    assert p.page.evaluate("sessionStorage.length") == 0 and p.page.is_visible("#login")
    p.page.unroute("**/whoami")

    p.page.fill("#key", "mp_ключ")
    p.page.press("#key", "Enter")
    expect(p.page.locator("#login-error")).to_contain_text("a key holds only ASCII characters")
    assert p.page.evaluate("sessionStorage.length") == 0 and p.page.is_visible("#login")

    p.page.fill("#key", data["key"])  # the same field, now with a good key, opens the memory
    p.page.press("#key", "Enter")
    expect(p.page.locator("#who")).to_have_text("memory of alice")
    assert p.page.evaluate("sessionStorage.getItem('memory_pipelines.key')") == data["key"]
    assert p.page.inner_text("#login-error") == "" and p.errors == []


LONG = "https://example.com/" + "a" * 400  # one word: nowhere to break but anywhere


def _too_wide(p: Page) -> list[str]:
    """The parts reaching past the window's right edge: none when the page is no wider than the window and every
    card, header control and search column is inside it (a wide table may scroll inside its card)."""
    return p.page.evaluate("""() => [...document.querySelectorAll(
            "header, header *, .card, article.build, .build-head, .table-scroll, #results, #detail, #related")]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5)
        .map((e) => `${e.tagName}#${e.id}.${e.className}`)""") + (
        [] if p.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth") else ["the page"])


def _box(p: Page, selector: str) -> dict:
    return p.page.locator(selector).first.bounding_box()


def test_long_words_wrap_and_the_view_fits_a_phone(served, runtime, page_of):
    """A 400-character word made the page 3,600 px wide and pushed Detail off-screen; at 375 px the header's
    buttons, the build tables and the search columns ran off the screen."""
    url, data = served
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {data['key']}"}, timeout=60) as c:
        assert c.post("/ingest/memory", json={"project_name": "web-app", "content_type": "insight",
                                              "content": f"{LONG} cookie auth"}).status_code == 200
        assert c.post("/api/brain/memory/context", json={"query": LONG}).status_code == 200
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    p = page_of(url)
    _login(p, data["key"])
    assert LONG in p.page.inner_text("article.build .query") and _too_wide(p) == []
    p.page.select_option("#mode", "keyword")
    _search(p, LONG)
    p.page.locator("#results li.match button.match-title").first.click()
    p.page.wait_for_selector("#detail .detail-title")
    assert LONG in p.page.inner_text("#detail") and _too_wide(p) == []
    detail = _box(p, "#detail")
    assert detail["x"] + detail["width"] <= 1280 and detail["x"] > _box(p, "#results")["x"]  # beside the list

    p.page.set_viewport_size({"width": 375, "height": 740})
    assert _too_wide(p) == []
    for button in ("#forget", "#export", "#refresh"):
        box = _box(p, button)
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375, button
    assert _box(p, "#detail")["y"] > _box(p, "#results")["y"] + _box(p, "#results")["height"]  # stacked
    card = _box(p, "article.build")
    assert card["x"] + card["width"] <= 375
    assert p.page.locator("article.build .table-scroll").first.evaluate("t => t.scrollWidth > t.clientWidth")
    assert p.errors == []


def _alert(p: Page, text: str):
    """The message line (role=alert) saying `text`."""
    return p.page.get_by_role("alert").filter(has_text=text)


def _alerts(p: Page) -> list[str]:
    """What the message lines say now."""
    return [t for t in p.page.get_by_role("alert").all_inner_texts() if t.strip()]


def test_errors_show_where_asked_and_a_hung_request_ends_with_words(served, page_of):
    """A failed Refresh said "Failed to fetch" 4,000 px down the page; a search on a frozen database waited with
    no end and no sign, its button active."""
    url, data = served
    p = page_of(url)
    p.page.clock.install()  # the page's 30 s timeout runs on a clock the test moves
    _login(p, data["key"])
    p.page.route("**/api/**", lambda route: route.abort("connectionrefused"))
    p.page.click("#refresh")
    said = _alert(p, "the server could not be reached")
    expect(said).to_be_visible()
    expect(said).to_be_in_viewport()  # beside the Refresh button, not under the search card
    p.page.unroute("**/api/**")

    held = Held(p, lambda u, m, b: u.endswith("/search"))
    button = p.page.locator("#search-form button[type=submit]")
    p.page.fill("#q", "cookie auth subdomains")
    button.click()
    expect(button).to_be_disabled()
    expect(p.page.locator("#search-card")).to_have_attribute("aria-busy", "true")
    p.page.clock.run_for(29_000)
    assert _alerts(p) == [] and button.is_disabled()
    p.page.clock.run_for(2_000)
    expect(_alert(p, "the server did not answer within 30 s")).to_be_visible()
    expect(button).to_be_enabled()
    assert p.page.get_attribute("#search-card", "aria-busy") is None
    for route in held.routes:
        route.abort()
    assert p.errors == []


def test_controls_have_names_focus_follows_and_the_chart_can_be_read(served, page_of):
    """#q had only a placeholder, every "show all" button the same name, focus fell to the body after login and
    after "show all", the search note was not announced and the chart's numbers were in tooltips only."""
    url, data = served
    p = page_of(url)
    _login(p, data["key"])
    assert p.page.evaluate("document.activeElement.closest('#app') !== null")
    expect(p.page.get_by_role("searchbox", name="Search your memory")).to_have_count(1)
    assert p.page.get_attribute("#search-note", "aria-live") == "polite"

    builds = httpx.get(f"{url}/api/brain/memory/builds", headers={"Authorization": f"Bearer {data['key']}"}).json()
    more = [b for b in builds["builds"] if b["candidates_count"] > len(b["items"])]
    assert more
    for b in more:  # one button, named after its build
        expect(p.page.get_by_role("button", name=f"show all {b['candidates_count']} scored candidates of "
                                               f"“{b['query']}”")).to_have_count(1)
    target = more[0]["retrieval_id"]
    p.page.locator(f"article.build[data-id='{target}'] button.more-items").click()
    p.page.locator(f"article.build[data-id='{target}'] button.more-items").wait_for(state="detached")
    assert p.page.evaluate("document.activeElement.closest('article.build')?.dataset.id") == target

    rates = httpx.get(f"{url}/api/brain/memory/hit-rates?days=30",
                      headers={"Authorization": f"Bearer {data['key']}"}).json()
    table = p.page.get_by_role("table", name="hit rate per day")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(30)
    fed = [i for i, d in enumerate(rates["daily"]) if d["hit_rate"] is not None]
    assert fed
    for i in fed:
        d = rates["daily"][i]
        assert rows.nth(i).locator("td").all_inner_texts()[:3] == [
            d["day"], f"{round(100 * d['hit_rate'])}%", f"{d['used']} of {d['injected']}"]
    assert p.errors == []


def test_empty_states_a_removed_item_and_a_fresh_start_for_the_next_key(served, page_of):
    """Bob (builds, no feedback) got a header-only per-source table, "(0 of 0)" and "show all 0 scored
    candidates"; a match forgotten since left the old detail on screen; alice's 7 days and keyword mode carried
    over to bob."""
    url, data = served
    p = page_of(url)
    _login(p, data["key"])
    builds = httpx.get(f"{url}/api/brain/memory/builds", headers={"Authorization": f"Bearer {data['key']}"}).json()
    for b in builds["builds"]:  # the button only where it adds candidates
        shown = p.page.locator(f"article.build[data-id='{b['retrieval_id']}'] button.more-items").count()
        assert shown == (b["candidates_count"] > len(b["items"])), b["query"]

    p.page.select_option("#days", "7")
    expect(p.page.locator("#chart .day")).to_have_count(7)
    p.page.select_option("#mode", "keyword")
    _search(p, "cookie")
    other = next(i for i in _ids(p, "#results li.match") if i != data["task"])
    p.page.locator(f"#results li.match[data-id='{other}'] button.match-title").click()
    p.page.wait_for_selector(f"#detail .detail-title[data-id='{other}']")
    r = httpx.delete(f"{url}/api/tasks/{data['task']}", headers={"Authorization": f"Bearer {data['key']}"})
    assert r.status_code == 200, r.text
    p.page.locator(f"#results li.match[data-id='{data['task']}'] button.match-title").click()
    expect(p.page.locator("#detail")).to_contain_text("no longer in your memory")
    assert p.page.locator("#detail .detail-title").count() == 0 and _alerts(p) == []

    p.page.click("#forget")
    _login(p, data["bob_key"], load=False)
    assert p.page.input_value("#days") == "30" and p.page.input_value("#mode") == "summary"
    expect(p.page.locator("#chart .day")).to_have_count(30)
    assert "(0 of 0)" not in p.page.inner_text("#hit-total") and "No feedback" in p.page.inner_text("#hit-total")
    assert not p.page.is_visible("#by-source") and p.page.is_visible("#by-source-empty")
    assert p.page.locator("button.more-items").count() == 0  # bob's one build found nothing: no header-only table
    assert p.page.locator("article.build table.items").count() == 0
    assert "Nothing injected" in p.page.inner_text("article.build")
    assert p.errors == []
