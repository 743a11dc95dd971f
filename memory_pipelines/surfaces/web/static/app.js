// The memory view: calls the HTTP API with the key from sessionStorage; renders with DOM nodes and
// textContent only (memory text is never parsed as HTML).
"use strict";

const KEY = "memory_pipelines.key";
const API = new URL("../", window.location.href); // the API root (the page is served at <root>/ui/)
const $ = (id) => document.getElementById(id);
let cursor = null;
let trail = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "style") Object.assign(node.style, value); // CSSOM: allowed by the page's CSP
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class Unauthorized extends Error {}

// The answer to a call with the key; a refusal as an error in the server's words.
async function request(path, body) {
  const key = sessionStorage.getItem(KEY);
  const init = { headers: { Authorization: `Bearer ${key}` } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(path, API), init);
  if (response.status === 401) throw new Unauthorized("the key was not accepted (unknown or revoked)");
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error(`${response.status}: ${said(data.detail) || response.statusText}`);
  }
  return response;
}

async function api(path, body) {
  const response = await request(path, body);
  return response.json().catch(() => ({}));
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

function fail(error) {
  if (error instanceof Unauthorized) {
    sessionStorage.removeItem(KEY);
    showLogin(error.message);
    return;
  }
  $("error").textContent = String(error.message || error);
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

// Nothing of one owner may stay on screen for the next key: every owner-specific part is emptied.
function clearView() {
  for (const id of ["hit-total", "chart", "chart-axis", "builds", "search-note", "results", "related", "error"]) {
    $(id).replaceChildren();
  }
  $("detail").replaceChildren(el("p", { class: "hint" }, "Pick a match."));
  $("by-source").tBodies[0].replaceChildren();
  $("q").value = "";
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

async function openMemory() {
  try {
    const me = await api("whoami");
    $("login").hidden = true;
    $("app").hidden = false;
    $("forget").hidden = false;
    $("export").hidden = false;
    $("export").dataset.owner = me.owner;
    $("who").hidden = false;
    $("who").textContent = `memory of ${me.owner}`;
    $("error").textContent = "";
    await Promise.all([loadRates(), loadBuilds(true)]);
  } catch (error) {
    fail(error);
  }
}

// -- hit rates ----------------------------------------------------------------------------------------------

async function loadRates() {
  const rates = await api(`api/brain/memory/hit-rates?days=${encodeURIComponent($("days").value)}`);
  const t = rates.total;
  $("hit-total").replaceChildren(
    el("strong", { id: "hit-rate" }, pct(t.hit_rate)),
    ` of injected items used (${t.used} of ${t.injected}) in ${t.with_feedback} builds with feedback; `,
    `${t.builds} builds from ${rates.since} to ${rates.until} (UTC).`,
  );
  const chart = $("chart");
  chart.replaceChildren(
    ...rates.daily.map((d) => {
      const height = d.hit_rate === null ? 0 : Math.max(2, Math.round(d.hit_rate * 100));
      return el(
        "div",
        {
          class: d.hit_rate === null ? "day empty" : "day",
          title: `${d.day}: ${pct(d.hit_rate)} (${d.used}/${d.injected} used; ${d.builds} builds, ${d.with_feedback} with feedback)`,
          "data-day": d.day,
          "data-rate": d.hit_rate === null ? "" : String(d.hit_rate),
        },
        el("div", { class: "bar", style: { height: `${height}%` } }),
      );
    }),
  );
  $("chart-axis").replaceChildren(el("span", {}, rates.since), el("span", {}, rates.until));
  $("by-source").tBodies[0].replaceChildren(
    ...rates.by_source.map((s) =>
      el("tr", { "data-source": s.source },
        el("td", {}, s.source), el("td", { class: "num" }, s.injected), el("td", { class: "num" }, s.used),
        el("td", { class: "num" }, pct(s.hit_rate))),
    ),
  );
}

// -- builds -------------------------------------------------------------------------------------------------

function itemsTable(items) {
  return el("table", { class: "items" },
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

function buildCard(b) {
  const card = el("article", { class: "build", "data-id": b.retrieval_id },
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
    el("div", { class: "table-scroll" }, itemsTable(b.items)), // a narrow screen scrolls the table, not the page
  );
  const more = el("button", {
    type: "button", class: "link more-items",
    onclick: async () => {
      try {
        const full = await api(`api/brain/memory/builds/${encodeURIComponent(b.retrieval_id)}`);
        card.querySelector(".table-scroll").replaceChildren(itemsTable(full.items));
        more.remove();
      } catch (error) {
        fail(error);
      }
    },
  }, `show all ${b.candidates_count} scored candidates`);
  card.append(more);
  return card;
}

async function loadBuilds(fresh) {
  if (fresh) cursor = null;
  const page = await api(`api/brain/memory/builds?limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
  const cards = page.builds.map(buildCard);
  if (fresh) {
    $("builds").replaceChildren(...(cards.length ? cards : [el("p", { class: "hint" },
      "No context builds yet: POST /api/brain/memory/context builds one.")]));
  } else {
    $("builds").append(...cards);
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

async function search(event) {
  event.preventDefault();
  $("error").textContent = "";
  try {
    const answer = await api("api/brain/memory/search", { query: $("q").value, mode: $("mode").value, topK: 10 });
    $("search-note").textContent = answer.degraded ? `degraded: ${answer.degraded}` : `${answer.matches.length} matches`;
    trail = [];
    matchList($("results"), answer.matches, null);
    $("detail").replaceChildren(el("p", { class: "hint" }, "Pick a match."));
    $("related").replaceChildren();
  } catch (error) {
    $("search-note").textContent = ""; // the matches shown were another query's
    $("results").replaceChildren();
    fail(error);
  }
}

async function showDetail(id, fromId) {
  $("error").textContent = "";
  try {
    const d = await api(`api/brain/memory/detail/${encodeURIComponent(id)}`);
    trail = fromId === null ? [d] : [...trail.slice(0, trail.findIndex((t) => t.id === fromId) + 1), d];
    for (const li of document.querySelectorAll("ul.matches li")) li.classList.toggle("current", li.dataset.id === id);
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
  } catch (error) {
    fail(error);
  }
}

async function showRelated(id) {
  $("error").textContent = "";
  try {
    const answer = await api("api/brain/memory/search-related", { base_id: id, topK: 5 });
    matchList($("related"), answer.matches, id);
  } catch (error) {
    fail(error);
  }
}

// -- export -------------------------------------------------------------------------------------------------

// The download needs the key in a header, so it is fetched and saved from a blob rather than linked.
async function downloadExport() {
  const response = await request("api/owner/export");
  const url = URL.createObjectURL(await response.blob());
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
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    $("key").value = "";
    openMemory();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showLogin("");
  });
  // Each action clears the error line of the one before; a failure writes it again.
  const act = (run) => () => {
    $("error").textContent = "";
    run().catch(fail);
  };
  $("refresh").addEventListener("click", act(() => Promise.all([loadRates(), loadBuilds(true)])));
  $("more").addEventListener("click", act(() => loadBuilds(false)));
  $("export").addEventListener("click", act(downloadExport));
  $("days").addEventListener("change", act(() => loadRates()));
  $("search-form").addEventListener("submit", search);
  if (sessionStorage.getItem(KEY)) openMemory();
  else showLogin("");
});
