// The memory view: calls the HTTP API with the key from sessionStorage; renders with DOM nodes and
// textContent only (memory text is never parsed as HTML).
"use strict";

const KEY = "memory_pipelines.key";
const API = new URL("../", window.location.href); // the API root (the page is served at <root>/ui/)
const TIMEOUT_S = 30; // a frozen server must not leave the view waiting without a word
const $ = (id) => document.getElementById(id);
let cursor = null;
let trail = [];
let generation = 0; // one per key opened: a reply to an earlier key is never drawn
const latest = new Map(); // view → number of its newest request: an older, slower reply is dropped
const holds = new Map(); // control or section → requests running on it (busy while above 0)

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "style") Object.assign(node.style, value); // CSSOM: allowed by the page's CSP
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name.startsWith("data-") || name.startsWith("aria-") || name === "role") node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// -- requests -----------------------------------------------------------------------------------------------

class Unauthorized extends Error {}

class Refused extends Error {
  constructor(status, message) {
    super(`${status}: ${message}`);
    this.status = status;
  }
}

// The answer to a call (`read`: "json" or "blob"), begun within TIMEOUT_S; any failure as an error in words.
async function request(path, { body, key = sessionStorage.getItem(KEY), read = "json" } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_S * 1000);
  const init = { headers: { Authorization: `Bearer ${key}` }, signal: controller.signal };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  try {
    const response = await fetch(new URL(path, API), init);
    clearTimeout(timer); // the server answered: a long download (an export) is not a hang
    if (response.status === 401) throw new Unauthorized("the key was not accepted (unknown or revoked)");
    if (!response.ok) throw await refusal(response);
    return await (read === "blob" ? response.blob() : response.json());
  } catch (error) {
    throw inWords(error);
  } finally {
    clearTimeout(timer);
  }
}

const api = (path, body) => request(path, { body });

// A refusal in the server's words.
async function refusal(response) {
  const data = await response.json().catch(() => ({}));
  return new Refused(response.status, said(data.detail) || response.statusText);
}

// fetch's own failures ("Failed to fetch", an abort) said as what happened.
function inWords(error) {
  if (error.name === "AbortError") return new Error(`the server did not answer within ${TIMEOUT_S} s`);
  if (error instanceof TypeError) return new Error("the server could not be reached");
  return error;
}

// A refusal in words: a 422's list of problems as `field: message` (the field without `body`/`query`).
function said(detail) {
  if (typeof detail === "string" || detail === undefined) return detail;
  if (!Array.isArray(detail)) return JSON.stringify(detail);
  return detail.map((d) => {
    const field = (d.loc || []).slice(1).join(".");
    const message = String(d.msg || "");  // the server words it (no pydantic prefix)
    return field ? `${field}: ${message}` : message;
  }).join("; ");
}

// -- one action: current, busy, said where it was asked --------------------------------------------------------

// A request's claim on a view: it stays current while no other key was opened and no newer request for the
// same view was made (the latest request wins, whatever order the replies come in).
function claim(view) {
  const number = (latest.get(view) || 0) + 1;
  latest.set(view, number);
  const at = generation;
  return () => at === generation && latest.get(view) === number;
}

// A control is disabled (a second click would only repeat the request) and a section marked aria-busy.
function mark(node, on) {
  if (node.tagName === "BUTTON") node.disabled = on;
  else if (on) node.setAttribute("aria-busy", "true");
  else node.removeAttribute("aria-busy");
}

function hold(node) {
  holds.set(node, (holds.get(node) || 0) + 1);
  mark(node, true);
}

function release(node) {
  const left = Math.max(0, (holds.get(node) || 0) - 1);
  holds.set(node, left);
  if (!left) mark(node, false);
}

// Runs `load` with `busy` held; a request of an earlier key leaves the next key's controls alone.
async function busily(busy, load) {
  const at = generation;
  busy.forEach(hold);
  try {
    return await load();
  } finally {
    if (at === generation) busy.forEach(release);
  }
}

// One user action: the message lines emptied (what the last action said may no longer hold), `busy` held while
// `load` runs, the reply drawn only while the request is still current, a failure said at `where` (the line
// where the user acted) or handled by `failed`.
async function act({ view, where, busy = [], load, draw, failed }) {
  const current = claim(view);
  hush();
  try {
    const reply = await busily(busy, load);
    if (current()) draw(reply);
  } catch (error) {
    if (current()) (failed || fail)(error, where);
  }
}

// Every message line emptied.
function hush() {
  for (const line of document.querySelectorAll(".error")) line.textContent = "";
}

// A failure said at the line where the user acted; a refused key leads back to the login.
function fail(error, where) {
  if (error instanceof Unauthorized) {
    sessionStorage.removeItem(KEY);
    showLogin(error.message);
    return;
  }
  where.textContent = String(error.message || error);
}

const pct = (rate) => (rate === null || rate === undefined ? "–" : `${Math.round(rate * 100)}%`);
const num = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// -- login --------------------------------------------------------------------------------------------------

// A choice back to the one the page opened with (the next key starts from the defaults).
function resetChoice(select) {
  select.value = ([...select.options].find((o) => o.defaultSelected) || select.options[0]).value;
}

// Nothing of one owner may stay on screen for the next key: every owner-specific part is emptied, and every
// request still running for it stops counting.
function clearView() {
  generation += 1;
  for (const node of holds.keys()) mark(node, false);
  holds.clear();
  hush();
  for (const id of ["hit-total", "chart", "chart-axis", "builds", "search-note", "results", "related"]) {
    $(id).replaceChildren();
  }
  $("detail").replaceChildren(el("p", { class: "hint" }, "Pick a match."));
  $("by-source").tBodies[0].replaceChildren();
  $("chart-table").tBodies[0].replaceChildren();
  $("by-source-empty").hidden = true;
  $("q").value = "";
  resetChoice($("days"));
  resetChoice($("mode"));
  $("more").hidden = true;
  trail = [];
  cursor = null;
}

function showLogin(message) {
  clearView();
  $("app").hidden = true;
  $("who").hidden = true;
  $("forget").hidden = true;
  $("export").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("key").focus();
}

// Why a pasted key cannot be sent, or "" (a header carries ASCII only: fetch would throw on anything else).
function keyProblem(key) {
  return /^[\x21-\x7e]+$/.test(key) ? "" : "a key holds only ASCII characters, with no spaces: check what was pasted";
}

// The key is kept for the tab only once the server accepted it.
async function logIn(key) {
  const problem = keyProblem(key);
  if (problem) {
    showLogin(problem);
    return;
  }
  await act({
    view: "login", where: $("login-error"), busy: [$("open"), $("login")],
    load: () => request("whoami", { key }),
    draw: (me) => {
      sessionStorage.setItem(KEY, key);
      showMemory(me.owner);
    },
    failed: (error) => {
      if (error instanceof Unauthorized) sessionStorage.removeItem(KEY);
      showLogin(error.message);
    },
  });
}

function showMemory(owner) {
  clearView();
  $("key").value = "";
  $("login").hidden = true;
  $("app").hidden = false;
  $("forget").hidden = false;
  $("export").hidden = false;
  $("export").dataset.owner = owner;
  $("who").hidden = false;
  $("who").textContent = `memory of ${owner}`;
  $("rates-title").focus(); // the form just left is hidden: focus goes to the top of what opened
  loadRates();
  loadBuilds(true);
}

// -- hit rates ----------------------------------------------------------------------------------------------

// `where`: the Refresh button's line when it asked (one action, one message).
function loadRates(where = $("rates-error")) {
  return act({
    view: "rates", where, busy: [$("rates")],
    load: () => api(`api/brain/memory/hit-rates?days=${encodeURIComponent($("days").value)}`),
    draw: drawRates,
  });
}

function totalLine(rates) {
  const t = rates.total;
  const span = `${t.builds} ${t.builds === 1 ? "build" : "builds"} from ${rates.since} to ${rates.until} (UTC)`;
  if (!t.with_feedback) return [`No feedback yet in these ${rates.days} days: ${span}, none reported which items it used.`];
  return [
    el("strong", { id: "hit-rate" }, pct(t.hit_rate)),
    ` of injected items used (${t.used} of ${t.injected}) in ${t.with_feedback} builds with feedback; `,
    `${span}.`,
  ];
}

function dayBar(d) {
  const height = d.hit_rate === null ? 0 : Math.max(2, Math.round(d.hit_rate * 100));
  return el("div", {
    class: d.hit_rate === null ? "day empty" : "day",
    title: `${d.day}: ${pct(d.hit_rate)} (${d.used}/${d.injected} used; ${d.builds} builds, ${d.with_feedback} with feedback)`,
    "data-day": d.day,
    "data-rate": d.hit_rate === null ? "" : String(d.hit_rate),
  }, el("div", { class: "bar", style: { height: `${height}%` } }));
}

// The bars' numbers for a screen reader (the bars themselves are hidden from it).
function dayRow(d) {
  return el("tr", {}, el("td", {}, d.day), el("td", {}, pct(d.hit_rate)),
    el("td", {}, `${d.used} of ${d.injected}`), el("td", {}, `${d.builds}, ${d.with_feedback} with feedback`));
}

function drawRates(rates) {
  $("hit-total").replaceChildren(...totalLine(rates));
  $("chart").replaceChildren(...rates.daily.map(dayBar));
  $("chart-table").tBodies[0].replaceChildren(...rates.daily.map(dayRow));
  $("chart-axis").replaceChildren(el("span", {}, rates.since), el("span", {}, rates.until));
  $("by-source").tBodies[0].replaceChildren(
    ...rates.by_source.map((s) =>
      el("tr", { "data-source": s.source },
        el("td", {}, s.source), el("td", { class: "num" }, s.injected), el("td", { class: "num" }, s.used),
        el("td", { class: "num" }, pct(s.hit_rate))),
    ),
  );
  const none = !rates.by_source.length;
  $("by-source").hidden = none;
  $("by-source-empty").hidden = !none;
  $("by-source-empty").textContent = none ? "No source has feedback in these days: nothing to count per source yet." : "";
}

// -- builds -------------------------------------------------------------------------------------------------

function itemsTable(items, label) {
  return el("table", { class: "items", "aria-label": label, tabIndex: label ? -1 : null },
    el("thead", {}, el("tr", {},
      ["#", "source", "title", "score", "relevance", "decay", "mode weight", "age (d)", "tokens", "used"].map((h, i) =>
        el("th", { class: i >= 3 && i <= 8 ? "num" : null }, h)))),
    el("tbody", {}, items.map((it) =>
      el("tr", {
        class: `item${it.used ? " used" : ""}${it.injected ? "" : " skipped"}`,
        "data-id": it.id, "data-used": String(it.used), "data-injected": String(it.injected),
      },
        el("td", { class: "num" }, it.injected ? it.mmr_rank : `(${it.rank})`),
        el("td", {}, el("span", { class: "src" }, it.source)),
        el("td", { class: "title" }, it.title === null ? el("em", {}, "(deleted)") : it.title),
        el("td", { class: "num score" }, num(it.score)),
        el("td", { class: "num" }, num(it.relevance)),
        el("td", { class: "num" }, num(it.decay)),
        el("td", { class: "num" }, num(it.mode_weight, 2)),
        el("td", { class: "num" }, num(it.age_days, 1)),
        el("td", { class: "num" }, it.tokens === null ? "–" : it.tokens),
        el("td", { class: "used-cell" }, it.used ? el("span", { class: "mark used-mark", title: "used" }, "✓ used") : ""),
      ))));
}

// "show all N scored candidates", named after its build (ten such buttons must not sound alike); none when
// every candidate is shown already.
function moreItemsButton(b, card) {
  if (b.candidates_count <= b.items.length) return null;
  const what = `all ${b.candidates_count} scored candidates`;
  const where = el("p", { class: "error", role: "alert" });
  const button = el("button", {
    type: "button", class: "link more-items", "aria-label": `show ${what} of “${b.query}” (${when(b.created_at)})`,
    onclick: () => act({
      view: `build ${b.retrieval_id}`, where, busy: [button],
      load: () => api(`api/brain/memory/builds/${encodeURIComponent(b.retrieval_id)}`),
      draw: (full) => {
        const table = itemsTable(full.items, `${what} of “${b.query}”`);
        card.querySelector(".table-scroll").replaceChildren(table);
        button.remove();
        table.focus(); // the button is gone: focus goes to what it showed
      },
    }),
  }, `show ${what}`);
  return [button, where];
}

function buildCard(b) {
  const card = el("article", { class: "build", "data-id": b.retrieval_id, tabIndex: -1 },
    el("div", { class: "build-head" },
      el("span", { class: "when" }, when(b.created_at)),
      el("span", { class: "mode" }, el("span", { class: "src" }, b.mode)),
      el("span", { class: "query" }, b.query),
      el("span", { class: "stats" },
        `${b.token_used}/${b.token_budget} tokens · ${b.injected_count} injected of ${b.candidates_count} · `,
        el("span", { class: "used-count" }, b.feedback_at ? `${b.used_count} used` : "no feedback"),
        b.degraded ? ` · degraded: ${b.degraded}` : "",
        b.exclude_session ? el("span", { class: "left-out" }, ` · conversation left out: ${b.exclude_session}`) : ""),
    ),
    el("div", { class: "table-scroll" }, b.items.length ? itemsTable(b.items)
      : el("p", { class: "hint" }, "Nothing injected: no candidate cleared the relevance floor and the budget.")),
  );
  card.append(...(moreItemsButton(b, card) || []));
  return card;
}

// The first page (`fresh`) or the next one; Refresh and Older builds stay disabled while either runs, so the
// cursor is never read twice.
function loadBuilds(fresh) {
  return act({
    view: "builds", where: $(fresh ? "builds-error" : "more-error"), busy: [$("builds-card"), $("refresh"), $("more")],
    load: () => api(`api/brain/memory/builds?limit=10${!fresh && cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`),
    draw: (page) => drawBuilds(page, fresh),
  });
}

function drawBuilds(page, fresh) {
  const cards = page.builds.map(buildCard);
  if (fresh) {
    $("builds").replaceChildren(...(cards.length ? cards : [el("p", { class: "hint" },
      "No context builds yet: POST /api/brain/memory/context builds one.")]));
  } else {
    $("builds").append(...cards);
    if (cards.length) cards[0].focus(); // where the older builds start (the button may be hidden now)
  }
  cursor = page.next_cursor;
  $("more").hidden = !cursor;
}

// -- search: summary → detail → related ---------------------------------------------------------------------

function matchList(target, matches, fromId) {
  target.replaceChildren(...(matches.length ? matches.map((m) =>
    el("li", { class: "match", "data-id": m.id },
      el("button", { type: "button", class: "link match-title", onclick: () => showDetail(m.id, fromId) }, m.title),
      " ", el("span", { class: "src" }, m.level), " ",
      el("span", { class: "similarity" }, num(m.similarity, 4)),
      el("div", { class: "preview" }, m.preview))) : [el("li", { class: "hint" }, "no matches")]));
}

function pickHint(text) {
  $("detail").replaceChildren(el("p", { class: "hint" }, text));
  $("related").replaceChildren();
}

function search(event) {
  event.preventDefault();
  const query = $("q").value;
  $("search-note").textContent = "searching…";
  return act({
    view: "search", where: $("search-error"), busy: [$("search-card"), $("search-button")],
    load: () => api("api/brain/memory/search", { query, mode: $("mode").value, topK: 10 }),
    draw: (answer) => {
      $("search-note").textContent = answer.degraded ? `degraded: ${answer.degraded}` : `${answer.matches.length} matches`;
      trail = [];
      claim("detail"); // a detail still loading belongs to the list this one replaces
      matchList($("results"), answer.matches, null);
      pickHint("Pick a match.");
    },
    failed: (error, where) => {
      $("search-note").textContent = ""; // the matches shown were another query's
      $("results").replaceChildren();
      fail(error, where);
    },
  });
}

function showDetail(id, fromId) {
  return act({
    view: "detail", where: $("search-error"), busy: [$("detail")],
    load: () => api(`api/brain/memory/detail/${encodeURIComponent(id)}`),
    draw: (d) => drawDetail(d, fromId),
    failed: (error, where) => {
      if (error.status !== 404) return fail(error, where);
      markCurrent(null);
      pickHint("This item is no longer in your memory: it was removed after the list was drawn.");
    },
  });
}

function markCurrent(id) {
  for (const li of document.querySelectorAll("ul.matches li")) li.classList.toggle("current", li.dataset.id === id);
}

function drawDetail(d, fromId) {
  trail = fromId === null ? [d] : [...trail.slice(0, trail.findIndex((t) => t.id === fromId) + 1), d];
  markCurrent(d.id);
  const meta = Object.entries(d.metadata || {}).filter(([, v]) => v !== null && v !== "" && !(Array.isArray(v) && !v.length));
  $("detail").replaceChildren(
    trail.length > 1 ? el("div", { class: "trail" }, trail.map((t) => t.title).join(" → ")) : "",
    el("div", { class: "detail-title match-title", "data-id": d.id }, d.title),
    el("div", {}, el("span", { class: "src" }, d.level), d.status ? ` · ${d.status}` : "", ` · ${when(d.created_at)}`),
    el("div", { class: "body" }, d.description || ""),
    el("dl", {}, meta.map(([k, v]) => [el("dt", {}, k), el("dd", {}, typeof v === "string" ? v : JSON.stringify(v))])),
    el("button", { type: "button", id: "related-button", onclick: () => showRelated(d.id) }, "Related"),
  );
  $("related").replaceChildren();
}

// The related list belongs to the detail on screen: a newer detail request drops it (same view).
function showRelated(id) {
  return act({
    view: "detail", where: $("search-error"), busy: [$("related"), $("related-button")],
    load: () => api("api/brain/memory/search-related", { base_id: id, topK: 5 }),
    draw: (answer) => matchList($("related"), answer.matches, id),
  });
}

// -- export -------------------------------------------------------------------------------------------------

// The download needs the key in a header, so it is fetched and saved from a blob rather than linked.
function downloadExport() {
  return act({
    view: "export", where: $("error"), busy: [$("export")],
    load: () => request("api/owner/export", { read: "blob" }),
    draw: saveBlob,
  });
}

function saveBlob(blob) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: `${$("export").dataset.owner || "memory"}-export.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// -- wiring -------------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key").value.trim();
    if (key) logIn(key);
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showLogin("");
  });
  $("refresh").addEventListener("click", () => Promise.all([loadRates($("builds-error")), loadBuilds(true)]));
  $("more").addEventListener("click", () => loadBuilds(false));
  $("export").addEventListener("click", downloadExport);
  $("days").addEventListener("change", () => loadRates());
  $("search-form").addEventListener("submit", search);
  // A changed query may replace the search still running (the newest wins); the same one would only repeat it.
  for (const [id, type] of [["q", "input"], ["mode", "change"]]) {
    $(id).addEventListener(type, () => { $("search-button").disabled = false; });
  }
  const stored = sessionStorage.getItem(KEY);
  if (stored) logIn(stored);
  else showLogin("");
});
