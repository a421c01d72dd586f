// wharf's dashboard: one script, no framework, no build step. Every figure comes from the
// management API (/api/...), called with HTTP basic credentials kept in this tab's
// sessionStorage, as RabbitMQ's UI sends them on each call. Pages are picked by the URL's
// hash (#/queues, #/queues/VHOST/NAME, ...), so links, history and the keyboard just work.
"use strict";

const POLL_MS = 5000;            // RabbitMQ's UI refreshes every 5 s.
const HISTORY = 60;              // samples kept per chart: the last 5 minutes.
const PAGE_SIZE = 100;           // rows per page of a listing (server-side paging).
const BROWSE_COUNT = 20;         // messages per page of the browse view.

const $ = (sel, root = document) => root.querySelector(sel);
let timer = null;                // the current page's polling timer
const history = [];              // overview samples: {t, stats, totals}

// ---------- the API ----------

function credentials() { return sessionStorage.getItem("wharf.auth"); }

class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function api(method, path, body, headers = {}) {
  const init = { method, headers: { ...headers, Authorization: "Basic " + credentials() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!resp.ok) throw new ApiError(resp.status, (data && data.reason) || resp.statusText);
  return data;
}

const enc = encodeURIComponent;
const qpath = (vhost, name) => `${enc(vhost)}/${enc(name)}`;

// ---------- small DOM helpers ----------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function say(text, isError) {
  const s = $("#status");
  s.textContent = text || "";
  s.className = isError ? "error" : "";
}

function fmtNum(n) {
  if (n === undefined || n === null) return "–";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(1);
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function fmtTime(ms) {
  return ms === null || ms === undefined ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}

function table(caption, headers, rows, opts = {}) {
  const head = el("tr", {}, headers.map((h) => {
    const label = typeof h === "string" ? h : h.label;
    const cls = h.num ? "num" : null;
    if (h.sort && opts.onSort) {
      const active = opts.sort === h.sort;
      return el("th", { scope: "col", class: cls, "aria-sort": active ? (opts.reverse ? "descending" : "ascending") : null },
        el("button", { type: "button", onclick: () => opts.onSort(h.sort) },
          label + (active ? (opts.reverse ? " ↓" : " ↑") : "")));
    }
    return el("th", { scope: "col", class: cls, text: label });
  }));
  const body = rows.length
    ? rows.map((r) => el("tr", {}, r.map((c, i) => el(i === 0 ? "th" : "td",
        { scope: i === 0 ? "row" : null, class: headers[i] && headers[i].num ? "num" : null }, c))))
    : [el("tr", {}, el("td", { colspan: headers.length, text: opts.empty || "None." }))];
  return el("table", { id: opts.id }, el("caption", { text: caption }), el("thead", {}, head), el("tbody", {}, body));
}

function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}

// ---------- login ----------

function showLogin(message) {
  $("#nav").hidden = true;
  $("#who").hidden = true;
  $("#page").replaceChildren();
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#login-user").focus();
}

function logout(message) {
  sessionStorage.removeItem("wharf.auth");
  stopPolling();
  showLogin(message);
}

async function login(ev) {
  ev.preventDefault();
  const user = $("#login-user").value;
  const pass = $("#login-pass").value;
  sessionStorage.setItem("wharf.auth", btoa(unescape(enc(user + ":" + pass))));
  try {
    const who = await api("GET", "/api/whoami");
    $("#login-pass").value = "";
    sessionStorage.setItem("wharf.user", who.name);
    route();
  } catch (e) {
    sessionStorage.removeItem("wharf.auth");
    $("#login-error").textContent = e.status === 401 ? "Login failed: " + e.message : "Error: " + e.message;
  }
}

// ---------- routing ----------

function stopPolling() { if (timer) { clearInterval(timer); timer = null; } }

function poll(fn) {
  stopPolling();
  const run = () => fn().catch(fail);
  run();
  timer = setInterval(run, POLL_MS);
}

function fail(e) {
  if (e instanceof ApiError && e.status === 401 && /Login failed/.test(e.message)) return logout("Login failed");
  say(e instanceof ApiError ? `The API answered ${e.status}: ${e.message}` : String(e), true);
}

// ---------- pages ----------

// Every page: `#/<name>/<rest...>` calls `PAGES[name](root, rest)`. Pages defined in other
// scripts (loaded after this one, see index.html) add themselves with `registerPage`, and
// their nav link with a `data-page` attribute in index.html.
const PAGES = {
  "": overviewPage,
  connections: connectionsPage,
  channels: channelsPage,
  queues: (root, rest) => rest.length >= 2 ? queuePage(root, rest[0], rest.slice(1).join("/")) : queuesPage(root),
};

function registerPage(name, render) { PAGES[name] = render; }

function route() {
  if (!credentials()) return showLogin();
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#who").hidden = false;
  $("#who-name").textContent = "User: " + (sessionStorage.getItem("wharf.user") || "");
  stopPolling();
  say("");
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [page, ...rest] = parts;
  const render = PAGES[page] || overviewPage;
  for (const a of document.querySelectorAll("nav a")) {
    const current = (a.dataset.page === "overview" && page === "") || a.dataset.page === page;
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const root = $("#page");
  root.replaceChildren();
  try { render(root, rest); } catch (e) { fail(e); }
  // Keyboard and screen-reader users land on the new page's heading.
  const h1 = root.querySelector("h1");
  if (h1) { h1.setAttribute("tabindex", "-1"); h1.focus(); }
}

// ---------- overview ----------

const RATE_SERIES = [
  ["publish", "Published"], ["confirm", "Confirmed"], ["deliver_get", "Delivered"],
  ["ack", "Acked"], ["redeliver", "Redelivered"], ["expired", "Expired"],
  ["dead_lettered", "Dead-lettered"],
];
const QUEUED_SERIES = [["messages_ready", "Ready"], ["messages_unacknowledged", "Unacked"]];

// A line chart in SVG of `series` ([key, label]) over the kept history; `value(sample, key)`.
function chart(id, title, series, value) {
  const W = 600, H = 160, L = 46, B = 16;
  const pts = history.slice(-HISTORY);
  let max = 1;
  for (const p of pts) for (const [k] of series) max = Math.max(max, value(p, k) || 0);
  const x = (i) => L + (W - L - 4) * (pts.length <= 1 ? 1 : i / (HISTORY - 1));
  const y = (v) => 4 + (H - B - 8) * (1 - v / max);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "plot");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-labelledby", id + "-caption");
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  add("line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B });
  add("line", { class: "axis", x1: L, y1: 4, x2: L, y2: H - B });
  add("text", { x: 2, y: 12 }, fmtNum(max));
  add("text", { x: 2, y: H - B }, "0");
  add("text", { x: L, y: H - 2 }, "5 min ago");
  add("text", { x: W - 30, y: H - 2 }, "now");
  series.forEach(([k], i) => {
    const path = pts.map((p, j) => `${x(HISTORY - pts.length + j).toFixed(1)},${y(value(p, k) || 0).toFixed(1)}`);
    // One sample so far: a short level line ending at "now", so the series shows at once.
    if (path.length === 1) path.unshift(`${(x(HISTORY - 1) - 8).toFixed(1)},${path[0].split(",")[1]}`);
    if (path.length) add("polyline", { class: "series s" + i, points: path.join(" ") });
  });
  const last = pts[pts.length - 1];
  const key = (i) => {
    const k = document.createElementNS(ns, "svg");
    k.setAttribute("class", "key");
    k.setAttribute("aria-hidden", "true");
    k.setAttribute("viewBox", "0 0 30 10");
    const l = document.createElementNS(ns, "line");
    for (const [a, v] of Object.entries({ class: "series s" + i, x1: 0, y1: 5, x2: 30, y2: 5 })) l.setAttribute(a, v);
    k.append(l);
    return k;
  };
  const legend = table(title + ": now", ["Series", { label: "Now", num: true }],
    series.map(([k, label], i) => [el("span", {}, key(i), " ", label), fmtNum(last ? value(last, k) : undefined)]));
  return el("figure", { class: "chart", id },
    el("figcaption", { id: id + "-caption", text: title + " (last 5 minutes, every 5 s)" }), svg, legend);
}

// Reads what the Prometheus text at /metrics says of the log's fsyncs: count and sum of the
// latency histogram and of the records-per-fsync histogram.
function walFigures(text) {
  const pick = (name) => {
    const m = text.match(new RegExp("^" + name + "(?:\\{[^}]*\\})? ([0-9.eE+-]+)$", "m"));
    return m ? Number(m[1]) : undefined;
  };
  return {
    fsyncs: pick("wharf_wal_fsync_seconds_count"),
    fsyncSeconds: pick("wharf_wal_fsync_seconds_sum"),
    records: pick("wharf_wal_records_per_fsync_sum"),
  };
}

function overviewPage(root) {
  root.append(el("h1", { text: "Overview" }), el("div", { id: "overview" }, "Loading…"));
  poll(async () => {
    const [ov, nodes, metrics] = await Promise.all([
      api("GET", "/api/overview"),
      api("GET", "/api/nodes").catch(() => null),   // monitoring and administrator only
      fetch("/metrics").then((r) => (r.ok ? r.text() : "")).catch(() => ""),
    ]);
    const stats = {};
    for (const [k] of RATE_SERIES) stats[k] = ov.message_stats && ov.message_stats[k + "_details"] ? ov.message_stats[k + "_details"].rate : 0;
    history.push({ t: Date.now(), stats, totals: ov.queue_totals || {}, wal: walFigures(metrics) });
    while (history.length > HISTORY) history.shift();
    $("#node-name").textContent = ov.node ? "on " + ov.node : "";
    // In a cluster /api/nodes lists every node (S-CLU-40): this one is named by the overview.
    renderOverview(ov, nodes && nodes.find((n) => n.name === ov.node), nodes);
  });
}

// The mean fsync latency and records per fsync over the last poll interval (or since start).
function walNow() {
  const n = history.length;
  if (!n || history[n - 1].wal.fsyncs === undefined) return null;
  const cur = history[n - 1].wal;
  const prev = n > 1 && history[n - 2].wal.fsyncs !== undefined ? history[n - 2].wal : { fsyncs: 0, fsyncSeconds: 0, records: 0 };
  const syncs = cur.fsyncs - prev.fsyncs;
  if (syncs <= 0) return { syncs: 0 };
  return { syncs, latencyMs: (1000 * (cur.fsyncSeconds - prev.fsyncSeconds)) / syncs, batch: (cur.records - prev.records) / syncs };
}

// The cluster's nodes as /api/nodes lists them (S-CLU-40), with each node's own view of the
// quorum queues' group and, for the node that answers, the entries its member voided
// (S-CLU-61; another node's entry does not say); null for a single node.
function clusterTable(nodes) {
  if (!nodes || !nodes.some((n) => n.wharf_cluster)) return null;
  return table("Cluster", ["Node", "Running", "AMQP address", "Raft role", { label: "Term", num: true },
    { label: "Voided entries", num: true }],
    nodes.map((n) => {
      const c = n.wharf_cluster || {};
      const g = (c.raft_groups || []).find((x) => x.raft_group === 1) || {};
      return [n.name, n.running ? "yes" : "no", c.amqp_address || "–", g.raft_state || "–", fmtNum(g.term),
        fmtNum(g.voided_entries)];
    }));
}

function renderOverview(ov, node, nodes) {
  const t = ov.object_totals || {};
  const q = ov.queue_totals || {};
  const wal = walNow();
  const alarms = node ? [node.mem_alarm ? "memory" : null, node.disk_free_alarm ? "disk" : null].filter(Boolean) : null;
  const cards = el("div", { class: "cards" },
    el("section", { "aria-labelledby": "c-totals" }, el("h2", { id: "c-totals", text: "Totals" }), facts([
      ["Connections", fmtNum(t.connections)], ["Channels", fmtNum(t.channels)],
      ["Queues", fmtNum(t.queues)], ["Consumers", fmtNum(t.consumers)], ["Exchanges", fmtNum(t.exchanges)],
      ["Messages", fmtNum(q.messages)], ["Ready", fmtNum(q.messages_ready)], ["Unacked", fmtNum(q.messages_unacknowledged)],
    ])),
    el("section", { "aria-labelledby": "c-node" }, el("h2", { id: "c-node", text: "Node" }), node ? facts([
      ["Memory used", fmtBytes(node.mem_used)], ["Memory limit", fmtBytes(node.mem_limit)],
      ["Disk free", fmtBytes(node.disk_free)], ["Disk free limit", fmtBytes(node.disk_free_limit)],
      ["Alarms", alarms.length ? "ON: " + alarms.join(", ") : "none"],
    ]) : el("p", { text: "Node figures need the monitoring or administrator tag." })),
    el("section", { "aria-labelledby": "c-wal" }, el("h2", { id: "c-wal", text: "Write-ahead log" }), facts([
      ["fsyncs (last 5 s)", wal ? fmtNum(wal.syncs) : "–"],
      ["fsync latency", wal && wal.latencyMs !== undefined ? wal.latencyMs.toFixed(2) + " ms" : "–"],
      ["records per fsync", wal && wal.batch !== undefined ? wal.batch.toFixed(1) : "–"],
    ])),
  );
  const listeners = table("Listeners", ["Protocol", "Address", { label: "Port", num: true }],
    (ov.listeners || []).map((l) => [l.protocol, l.ip_address, String(l.port)]));
  $("#overview").replaceChildren(
    chart("chart-rates", "Message rates (per second)", RATE_SERIES, (p, k) => p.stats[k]),
    chart("chart-queued", "Queued messages", QUEUED_SERIES, (p, k) => p.totals[k]),
    ...[cards, clusterTable(nodes), listeners].filter(Boolean));
}

// ---------- listings with server-side paging ----------

// A paged listing of `path` (RabbitMQ's page, page_size, name, use_regex, sort parameters).
function listing(root, { title, path, columns, headers, row, sortDefault, extra }) {
  const state = { page: 1, name: "", regex: false, sort: sortDefault, reverse: false };
  const out = el("div", { "aria-live": "polite" });
  const nameInput = el("input", { id: "filter-name", type: "search", name: "name" });
  const regexBox = el("input", { id: "filter-regex", type: "checkbox" });
  const form = el("form", { class: "inline", role: "search", onsubmit: (ev) => {
    ev.preventDefault(); state.name = nameInput.value; state.regex = regexBox.checked; state.page = 1; load().catch(fail);
  } }, el("label", { for: "filter-name" }, "Filter by name", nameInput),
    el("label", { class: "check", for: "filter-regex" }, regexBox, "Regular expression"),
    el("button", { type: "submit", text: "Filter" }));
  root.append(el("h1", { text: title }), form, out);
  if (extra) root.append(extra);
  async function load() {
    const params = new URLSearchParams({ page: state.page, page_size: PAGE_SIZE, columns: columns.join(",") });
    if (state.name) params.set("name", state.name);
    if (state.regex) params.set("use_regex", "true");
    if (state.sort) { params.set("sort", state.sort); params.set("sort_reverse", state.reverse); }
    const data = await api("GET", `${path}?${params}`);
    const go = (p) => () => { state.page = p; load().catch(fail); };
    const pager = el("p", { class: "pager" },
      `Page ${data.page} of ${Math.max(1, data.page_count)}: ${fmtNum(data.filtered_count)} matching of ${fmtNum(data.total_count)}`,
      el("button", { type: "button", disabled: data.page <= 1, onclick: go(data.page - 1), text: "Previous page" }),
      el("button", { type: "button", disabled: data.page >= data.page_count, onclick: go(data.page + 1), text: "Next page" }));
    const onSort = (s) => { state.reverse = state.sort === s ? !state.reverse : false; state.sort = s; load().catch(fail); };
    out.replaceChildren(pager, table(title, headers, data.items.map(row), { sort: state.sort, reverse: state.reverse, onSort, id: "listing" }));
  }
  poll(load);
}

function queueLink(vhost, name) {
  return el("a", { href: `#/queues/${qpath(vhost, name)}`, text: name });
}

function queuesPage(root) {
  const declare = declareForm();
  listing(root, {
    title: "Queues", path: "/api/queues", sortDefault: "name",
    columns: ["name", "vhost", "type", "state", "messages_ready", "messages_unacknowledged", "messages", "consumers", "policy"],
    headers: [{ label: "Name", sort: "name" }, { label: "Virtual host", sort: "vhost" }, "Type", "State",
      { label: "Ready", num: true, sort: "messages_ready" }, { label: "Unacked", num: true, sort: "messages_unacknowledged" },
      { label: "Total", num: true, sort: "messages" }, { label: "Consumers", num: true, sort: "consumers" }, "Policy"],
    row: (q) => [queueLink(q.vhost, q.name), q.vhost, q.type, q.state, fmtNum(q.messages_ready),
      fmtNum(q.messages_unacknowledged), fmtNum(q.messages), fmtNum(q.consumers), q.policy || ""],
    extra: declare,
  });
}

// Declare a queue: PUT /api/queues/{vhost}/{name} with durable, auto_delete and arguments.
function declareForm() {
  const f = el("form", { id: "declare-form" },
    el("fieldset", {}, el("legend", { text: "Add a queue" }),
      el("p", {}, el("label", { for: "dq-vhost" }, "Virtual host "), el("input", { id: "dq-vhost", value: "/", required: true })),
      el("p", {}, el("label", { for: "dq-name" }, "Name "), el("input", { id: "dq-name", required: true })),
      el("p", {}, el("label", { for: "dq-durable" }, "Durability "),
        el("select", { id: "dq-durable" }, el("option", { value: "true", text: "Durable" }), el("option", { value: "false", text: "Transient" }))),
      el("p", {}, el("label", { class: "check", for: "dq-autodelete" }, el("input", { id: "dq-autodelete", type: "checkbox" }), " Auto-delete")),
      el("p", {}, el("label", { for: "dq-args" }, "Arguments (a JSON object, for example {\"x-message-ttl\": 60000, \"x-queue-type\": \"quorum\"})"),
        el("textarea", { id: "dq-args", rows: 3 }, "{}")),
      el("p", {}, el("button", { type: "submit", text: "Add queue" }))));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let args;
    try { args = JSON.parse($("#dq-args").value || "{}"); } catch (e) { return say("Arguments are not JSON: " + e.message, true); }
    const vhost = $("#dq-vhost").value, name = $("#dq-name").value;
    try {
      await api("PUT", `/api/queues/${qpath(vhost, name)}`, { durable: $("#dq-durable").value === "true", auto_delete: $("#dq-autodelete").checked, arguments: args });
      say(`Queue ${name} declared.`);
    } catch (e) { fail(e); }
  });
  return f;
}

function connectionsPage(root) {
  listing(root, {
    title: "Connections", path: "/api/connections", sortDefault: "name",
    columns: ["name", "user", "vhost", "state", "channels", "user_provided_name", "client_properties", "peer_host", "peer_port"],
    headers: [{ label: "Name", sort: "name" }, { label: "User", sort: "user" }, "Virtual host", "Client name", "State",
      { label: "Channels", num: true }, "Close"],
    row: (c) => [c.name, c.user, c.vhost, c.user_provided_name || "", c.state, fmtNum(c.channels),
      el("button", { type: "button", class: "danger", "aria-label": "Close connection " + c.name, onclick: () => closeConnection(c.name) }, "Close")],
  });
}

async function closeConnection(name) {
  if (!confirm(`Close connection ${name}?`)) return;
  try {
    await api("DELETE", `/api/connections/${enc(name)}`, undefined, { "X-Reason": "Closed via the wharf dashboard" });
    say(`Connection ${name} closed.`);
  } catch (e) { fail(e); }
}

function channelsPage(root) {
  listing(root, {
    title: "Channels", path: "/api/channels", sortDefault: "name",
    columns: ["name", "user", "vhost", "state", "confirm", "prefetch_count", "messages_unacknowledged", "consumer_count"],
    headers: [{ label: "Channel", sort: "name" }, { label: "User", sort: "user" }, "Virtual host", "Mode", "State",
      { label: "Prefetch", num: true }, { label: "Unacked", num: true, sort: "messages_unacknowledged" }, { label: "Consumers", num: true }],
    row: (c) => [c.name, c.user, c.vhost, c.confirm ? "confirm" : "", c.state, fmtNum(c.prefetch_count),
      fmtNum(c.messages_unacknowledged), fmtNum(c.consumer_count)],
  });
}

// ---------- one queue ----------

// Sections other scripts add to the queue page: `make(vhost, name, base)` returns
// `{ element, refresh(q) }`; `refresh` runs on each poll with the queue's JSON.
const QUEUE_SECTIONS = [];

function registerQueueSection(make) { QUEUE_SECTIONS.push(make); }

function queuePage(root, vhost, name) {
  const base = `/api/queues/${qpath(vhost, name)}`;
  const sections = QUEUE_SECTIONS.map((make) => make(vhost, name, base));
  root.append(el("h1", {}, "Queue ", el("q", { text: name })),
    el("p", {}, "Virtual host ", el("code", { text: vhost }), " · ", el("a", { href: "#/queues", text: "All queues" }),
      " · ", el("a", { href: `#/dead-letters/${qpath(vhost, name)}`, text: "Dead-letter explorer" })),
    el("div", { id: "queue-facts" }, "Loading…"), el("div", { id: "queue-consumers" }), el("div", { id: "queue-bindings" }));
  root.append(actions(vhost, name, base), browseSection(base, vhost), ...sections.map((s) => s.element));
  poll(async () => {
    const [q, consumers, bindings] = await Promise.all([
      api("GET", base), api("GET", `/api/consumers/${enc(vhost)}`), api("GET", `${base}/bindings`)]);
    await Promise.all(sections.map((s) => s.refresh && s.refresh(q)));
    $("#queue-facts").replaceChildren(facts([
      ["Type", q.type], ["State", q.state], ["Durable", q.durable ? "yes" : "no"], ["Auto-delete", q.auto_delete ? "yes" : "no"],
      ["Ready", fmtNum(q.messages_ready)], ["Unacked", fmtNum(q.messages_unacknowledged)], ["Total", fmtNum(q.messages)],
      ["Bytes", fmtBytes(q.message_bytes)], ["Consumers", fmtNum(q.consumers)], ["Policy", q.policy || "none"],
      ["Operator policy", q.operator_policy || "none"], ["Arguments", el("code", { text: JSON.stringify(q.arguments) })],
    ].concat(q.members ? [["Leader", q.leader || "none known"], ["Members", q.members.join(", ")],
      ["Online", (q.online || []).join(", ") || "none"]] : [])), replicationTable(q));
    const mine = consumers.filter((c) => c.queue && c.queue.name === name);
    $("#queue-consumers").replaceChildren(table("Consumers", ["Tag", "Channel", "Ack", "Exclusive", { label: "Prefetch", num: true }, "Active", "Activity"],
      mine.map((c) => [c.consumer_tag, c.channel_details ? c.channel_details.name : "", c.ack_required ? "manual" : "auto",
        c.exclusive ? "yes" : "no", fmtNum(c.prefetch_count), c.active ? "yes" : "no", c.activity_status || ""]), { empty: "No consumers." }));
    $("#queue-bindings").replaceChildren(table("Bindings", ["From exchange", "Routing key", "Arguments"],
      bindings.map((b) => [b.source || "(default exchange)", b.routing_key, JSON.stringify(b.arguments || {})])));
  });
}

// A quorum queue's replication as this node's Raft sees it (S-CLU-41): each member's matched
// index and lag, known on the leader only.
function replicationTable(q) {
  const r = q.wharf_replication;
  if (!r) return "";
  return table(`Replication (group ${r.raft_group}, term ${r.term}, this node ${r.raft_state}, commit index ${fmtNum(r.commit_index)}, voided entries ${fmtNum(r.voided_entries)})`,
    ["Member", "Voter", { label: "Match index", num: true }, { label: "Lag (entries)", num: true }],
    r.members.map((m) => [m.node, m.voter ? "yes" : "learner", fmtNum(m.match_index), fmtNum(m.lag)]));
}

function actions(vhost, name, base) {
  const pub = el("form", { id: "publish-form" }, el("fieldset", {}, el("legend", { text: "Publish a message" }),
    el("p", {}, el("label", { for: "pub-persistent" }, "Delivery mode "), el("select", { id: "pub-persistent" },
      el("option", { value: "2", text: "Persistent" }), el("option", { value: "1", text: "Non-persistent" }))),
    el("p", {}, el("label", { for: "pub-headers" }, "Headers (JSON object)"), el("textarea", { id: "pub-headers", rows: 2 }, "{}")),
    el("p", {}, el("label", { for: "pub-props" }, "Properties (JSON object, for example {\"content_type\": \"application/json\"})"), el("textarea", { id: "pub-props", rows: 2 }, "{}")),
    el("p", {}, el("label", { for: "pub-payload" }, "Payload"), el("textarea", { id: "pub-payload", rows: 4 })),
    el("p", {}, el("button", { type: "submit", text: "Publish message" }))));
  pub.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const props = JSON.parse($("#pub-props").value || "{}");
      props.headers = JSON.parse($("#pub-headers").value || "{}");
      props.delivery_mode = Number($("#pub-persistent").value);
      const r = await api("POST", `/api/exchanges/${enc(vhost)}/amq.default/publish`,
        { routing_key: name, properties: props, payload: $("#pub-payload").value, payload_encoding: "string" });
      say(r.routed ? "Message published." : "Message published, but not routed.");
    } catch (e) { fail(e instanceof SyntaxError ? new Error("Headers or properties are not JSON: " + e.message) : e); }
  });
  const get = el("form", { id: "get-form" }, el("fieldset", {}, el("legend", { text: "Get messages" }),
    el("p", {}, el("label", { for: "get-ackmode" }, "Ack mode "), el("select", { id: "get-ackmode" },
      el("option", { value: "ack_requeue_true", text: "Nack message requeue true" }),
      el("option", { value: "reject_requeue_true", text: "Reject requeue true" }),
      el("option", { value: "ack_requeue_false", text: "Automatic ack (removes them)" }))),
    el("p", {}, el("label", { for: "get-count" }, "Messages "), el("input", { id: "get-count", type: "number", min: 1, value: 1 })),
    el("p", {}, el("button", { type: "submit", text: "Get messages" })), el("div", { id: "get-out" })));
  get.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const msgs = await api("POST", `${base}/get`, { count: Number($("#get-count").value), ackmode: $("#get-ackmode").value, encoding: "auto", truncate: 50000 });
      $("#get-out").replaceChildren(...(msgs.length ? msgs.map((m, i) => messageView(m, "Message " + (i + 1))) : [el("p", { text: "Queue is empty." })]));
    } catch (e) { fail(e); }
  });
  const danger = el("fieldset", {}, el("legend", { text: "Purge or delete" }),
    el("button", { type: "button", id: "purge", onclick: async () => {
      if (!confirm(`Purge every ready message of ${name}?`)) return;
      try { await api("DELETE", `${base}/contents`); say(`Queue ${name} purged.`); } catch (e) { fail(e); }
    } }, "Purge messages"), " ",
    el("button", { type: "button", id: "delete", class: "danger", onclick: async () => {
      if (!confirm(`Delete queue ${name}?`)) return;
      try { await api("DELETE", base); location.hash = "#/queues"; say(`Queue ${name} deleted.`); } catch (e) { fail(e); }
    } }, "Delete queue"));
  return el("div", {}, pub, get, danger);
}

// A message body shown by content type: pretty JSON when it is JSON, text otherwise.
function bodyView(m) {
  let text = m.payload;
  const type = (m.properties && m.properties.content_type) || "";
  if (m.payload_encoding === "string" && /json/.test(type)) {
    try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* truncated or not JSON: as is */ }
  }
  return el("pre", { class: "body" }, text);
}

function messageView(m, title) {
  const props = Object.assign({}, m.properties);
  const headers = props.headers || {};
  delete props.headers;
  return el("article", { class: "message" }, el("h3", { text: title }), facts([
    ["Exchange", m.exchange || "(default)"], ["Routing key", m.routing_key], ["Redelivered", m.redelivered ? "yes" : "no"],
    ["Size", fmtBytes(m.payload_bytes)], ["Properties", el("code", { text: JSON.stringify(props) })],
    ["Headers", el("code", { text: JSON.stringify(headers) })],
    ["Payload (" + m.payload_encoding + ")", bodyView(m)],
  ]));
}

// ---------- browse without consuming ----------

function browseSection(base, vhost) {
  const state = { offset: 0 };
  const out = el("div", { id: "browse-out", "aria-live": "polite" });
  const load = async () => {
    const page = await api("GET", `${base}/browse?offset=${state.offset}&count=${BROWSE_COUNT}`);
    const go = (o) => () => { state.offset = Math.max(0, o); load().catch(fail); };
    const last = page.offset + page.count;
    const pager = el("p", { class: "pager" },
      page.count ? `Messages ${fmtNum(page.offset + 1)}–${fmtNum(last)} of ${fmtNum(page.messages_ready)} ready` : `No messages from position ${fmtNum(page.offset + 1)} (${fmtNum(page.messages_ready)} ready)`,
      el("button", { type: "button", disabled: page.offset === 0, onclick: go(page.offset - BROWSE_COUNT), text: "Previous messages" }),
      el("button", { type: "button", disabled: last >= page.messages_ready, onclick: go(last), text: "Next messages" }));
    const rows = page.messages.map((m) => [
      fmtNum(m.position + 1), el("a", { href: `#/message/${enc(vhost)}/${m.message}`, text: `${m.message}`, "aria-label": `Timeline of message ${m.message}` }),
      m.properties && m.properties.message_id || "", m.routing_key === undefined ? "" : m.routing_key,
      fmtBytes(m.payload_bytes), fmtTime(m.enqueued_at), fmtTime(m.deadline), fmtNum(m.delivery_count), fmtNum(m.priority),
      m.paged_out ? "disk" : "memory",
      m.error ? el("span", { class: "error", text: m.error }) : el("details", {}, el("summary", { text: "Show" }),
        facts([["Properties", el("code", { text: JSON.stringify(m.properties) })]]), bodyView(m)),
    ]);
    out.replaceChildren(pager, table("Messages in queue order", [{ label: "#", num: true }, "Timeline", "Message id", "Routing key",
      { label: "Size", num: true }, "Enqueued", "Expires", { label: "Deliveries", num: true }, { label: "Priority", num: true },
      "Held in", "Content"], rows, { id: "browse-table", empty: "No messages here." }));
  };
  return el("section", { "aria-labelledby": "browse-title" }, el("h2", { id: "browse-title", text: "Browse messages" }),
    el("p", { text: "Pages through the ready messages in delivery order without consuming them: nothing is delivered, requeued or acknowledged." }),
    el("button", { type: "button", id: "browse", onclick: () => { state.offset = 0; load().catch(fail); } }, "Browse messages"), out);
}

// ---------- start ----------

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", () => logout());
  window.addEventListener("hashchange", route);
  route();
});
