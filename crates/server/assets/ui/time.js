// The queue page's additions (loaded after app.js, whose helpers it uses): message rates and
// the policy definition in effect, the time views (upcoming expiries and scheduled messages,
// S-UI-20, S-UI-21) and the search of a queue by message id, correlation id or header
// (S-UI-22). Everything is read from the management API; nothing here changes the queue.
"use strict";

const QUEUE_RATES = [["publish", "Published"], ["deliver_get", "Delivered"], ["ack", "Acked"],
  ["redeliver", "Redelivered"]];

// A duration in ms as words, its two largest units: "45 s", "3 min 20 s", "2 d 4 h".
function fmtDuration(ms) {
  if (ms === undefined || ms === null) return "–";
  let s = Math.max(0, Math.round(ms / 1000));
  const out = [];
  for (const [n, unit] of [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]]) {
    const v = Math.floor(s / n);
    s -= v * n;
    if (v) out.push(`${v} ${unit}`);
  }
  return out.length ? out.slice(0, 2).join(" ") : "now";
}

registerQueueSection((vhost, name) => {
  const wbase = `/api/wharf/queues/${qpath(vhost, name)}`;
  const rates = el("div", { id: "queue-rates" });
  const horizon = el("div", { id: "queue-expiry" });
  const scheduled = el("div", { id: "queue-scheduled" });
  const element = el("div", {},
    el("section", { "aria-labelledby": "rates-title" }, el("h2", { id: "rates-title", text: "Rates and policy in effect" }), rates),
    el("section", { "aria-labelledby": "time-title" }, el("h2", { id: "time-title", text: "Time" }),
      el("p", { text: "Counted from the broker's own deadlines (message and queue TTL, policies included) on its clock." }),
      horizon, scheduled),
    searchSection(wbase));
  const refresh = async (q) => {
    const ms = q.message_stats || {};
    rates.replaceChildren(
      table("Message rates", ["Series", { label: "Per second", num: true }, { label: "Total", num: true }],
        QUEUE_RATES.map(([k, label]) => [label, fmtNum(ms[k + "_details"] ? ms[k + "_details"].rate : 0), fmtNum(ms[k] || 0)]),
        { id: "rates-table" }),
      facts([["Definition in effect", el("code", { id: "effective-definition", text: JSON.stringify(q.effective_policy_definition || {}) })]]));
    const [h, s] = await Promise.all([api("GET", `${wbase}/expiry-horizon`), api("GET", `${wbase}/scheduled?count=20`)]);
    horizon.replaceChildren(
      table("Upcoming expiries", ["Expiring", { label: "Messages", num: true }], [
        ["already due", fmtNum(h.overdue)],
        ...h.expiring.map((e) => ["within the next " + e.within, fmtNum(e.count)]),
        ["at any time (have a deadline)", fmtNum(h.with_deadline)],
      ], { id: "expiry-table" }),
      el("p", {}, `Next deadline: ${h.next_deadline === null ? "none" : fmtTime(h.next_deadline)}. `,
        `${fmtNum(h.messages_ready)} ready; broker clock ${fmtTime(h.now)}.`));
    scheduled.replaceChildren(table(`Scheduled messages bound for this queue: ${s.total_complete ? "" : "at least "}${fmtNum(s.total)}`,
      ["Due", "Due in", "Exchange", "Routing key", "Message id", { label: "Size", num: true }],
      s.messages.map((m) => [fmtTime(m.due), fmtDuration(m.due_in_ms), m.exchange, m.routing_key,
        (m.properties && m.properties.message_id) || "", fmtBytes(m.payload_bytes)]),
      { id: "scheduled-table", empty: "No scheduled messages are bound for this queue." }));
  };
  return { element, refresh };
});

// Search: a form, then pages of matches; each step looks at up to 10,000 messages on the
// server and says where to continue.
function searchSection(wbase) {
  const state = { offset: 0, query: null };
  const field = el("select", { id: "search-field" },
    el("option", { value: "message_id", text: "Message id" }),
    el("option", { value: "correlation_id", text: "Correlation id" }),
    el("option", { value: "header", text: "Header" }));
  const headerName = el("input", { id: "search-header" });
  const headerLabel = el("label", { for: "search-header", hidden: true }, "Header name", headerName);
  field.addEventListener("change", () => { headerLabel.hidden = field.value !== "header"; });
  const value = el("input", { id: "search-value", required: true });
  const out = el("div", { id: "search-out", "aria-live": "polite" });
  const run = async () => {
    const params = new URLSearchParams(state.query);
    params.set("offset", state.offset);
    params.set("count", BROWSE_COUNT);
    const r = await api("GET", `${wbase}/search?${params}`);
    const more = el("button", { type: "button", id: "search-more", disabled: r.done,
      onclick: () => { state.offset = r.next_offset; run().catch(fail); } }, "Continue search");
    const looked = `Looked at positions ${fmtNum(r.offset + 1)}–${fmtNum(r.next_offset)} of ${fmtNum(r.messages_ready)} ready: ${fmtNum(r.count)} found`;
    out.replaceChildren(el("p", { class: "pager" }, looked + (r.done ? " (end of queue)." : "."), more),
      table("Matching messages", [{ label: "#", num: true }, "Message id", "Correlation id", "Routing key",
        { label: "Size", num: true }, "Enqueued", "Expires", "Content"],
      r.messages.map((m) => [fmtNum(m.position + 1), m.properties.message_id || "", m.properties.correlation_id || "",
        m.routing_key, fmtBytes(m.payload_bytes), fmtTime(m.enqueued_at), fmtTime(m.deadline),
        el("details", {}, el("summary", { text: "Show" }), facts([["Properties", el("code", { text: JSON.stringify(m.properties) })]]), bodyView(m))]),
      { id: "search-table", empty: "No match in these positions." }));
  };
  const form = el("form", { class: "inline", role: "search", id: "search-form", onsubmit: (ev) => {
    ev.preventDefault();
    state.query = field.value === "header" ? { header: headerName.value, value: value.value } : { [field.value]: value.value };
    state.offset = 0;
    run().catch(fail);
  } }, el("label", { for: "search-field" }, "Search by", field), headerLabel,
    el("label", { for: "search-value" }, "Equal to", value), el("button", { type: "submit", text: "Search" }));
  return el("section", { "aria-labelledby": "search-title" }, el("h2", { id: "search-title", text: "Search messages" }),
    el("p", { text: "Finds ready messages by message id, correlation id or a header value, in queue order, without consuming them." }),
    form, out);
}
