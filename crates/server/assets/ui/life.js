// wharf's dashboard, a message's life and the dead-letter explorer (S-UI-7..10): two pages
// that register themselves with app.js (loaded before this script):
//   #/message/VHOST/ID        the timeline of one message, read from the log;
//   #/dead-letters/VHOST/Q    a dead-letter queue grouped by death, and "move back".
"use strict";

const timelineHref = (vhost, id) => `#/message/${enc(vhost)}/${id}`;
const deadLettersHref = (vhost, queue) => `#/dead-letters/${qpath(vhost, queue)}`;

// ---------- a message's life ----------

// What one step says besides its name: queues, reasons, copies, with links.
function stepDetail(vhost, s) {
  const qlink = (q) => queueLink(vhost, q);
  const list = (qs) => qs.length ? qs.flatMap((q, i) => i ? [", ", qlink(q)] : [qlink(q)]) : ["no durable queue"];
  switch (s.event) {
    case "published": case "carried in checkpoint":
    case "enqueued (dead-lettered copy)": case "enqueued (moved back)":
      return [`via exchange ${s.exchange === "" ? "(default)" : s.exchange}, key ${s.routing_key}, into `, ...list(s.queues),
        `; enqueued ${fmtTime(s.enqueued_at)}`,
        ...Object.entries(s.deadlines || {}).filter(([, d]) => d !== null).map(([q, d]) => `; expires from ${q} at ${fmtTime(d)}`)];
    case "delivered": return ["from ", qlink(s.queue), ` (delivery ${s.delivery} from this queue)`];
    case "dead-lettered": case "moved back":
      return [s.queue ? ["out of ", qlink(s.queue)] : ["(was not logged in its queue)"],
        s.reason ? ` · reason ${s.reason}` : "",
        s.copy !== null ? [" · copy ", el("a", { href: timelineHref(vhost, s.copy), text: `message ${s.copy}` }), " into ", ...list(s.targets)] : " · no durable copy"];
    case "scheduled": return [`due ${fmtTime(s.due_at)}`];
    default: return s.queue ? ["in ", qlink(s.queue)] : [];
  }
}

function timelinePage(root, rest) {
  const [vhost, id] = rest;
  root.append(el("h1", {}, "Message ", el("q", { text: id })),
    el("p", {}, "Virtual host ", el("code", { text: vhost }), " · its life as the log tells it, oldest first."),
    el("div", { id: "timeline-out", "aria-live": "polite" }, "Reading the log…"));
  api("GET", `/api/wharf/messages/${enc(vhost)}/${enc(id)}/timeline`).then((t) => {
    const first = t.steps.find((s) => s.payload !== undefined);
    const items = t.steps.map((s) => el("li", { class: "step" },
      el("strong", { class: "event", text: s.event }), " ",
      s.message !== t.message ? el("span", { class: "copy-of" }, "(", el("a", { href: timelineHref(vhost, s.message), text: `message ${s.message}` }), ") ") : "",
      ...stepDetail(vhost, s),
      el("br"), el("small", { class: "where", text: `Lsn ${s.lsn} · ${s.file} @ ${s.offset}${s.in_checkpoint ? " (checkpoint: history before it is gone)" : ""}` })));
    const queued = t.still_queued.filter((q) => q.queues.length);
    $("#timeline-out").replaceChildren(
      el("ol", { id: "timeline", class: "timeline" }, items),
      el("p", { id: "timeline-end" }, queued.length
        ? ["Now: ", ...queued.flatMap((q, i) => [i ? "; " : "", `message ${q.message} is queued in `, q.queues.join(", ")])]
        : "Now: no longer in any durable queue."),
      first ? messageView(first, "Content when it entered") : "");
  }).catch((e) => {
    $("#timeline-out").replaceChildren(el("p", { class: "error", text: e.status === 404
      ? "The log holds no record of this message in this virtual host (transient messages are never logged)."
      : `The API answered ${e.status}: ${e.message}` }));
  });
}

// ---------- the dead-letter explorer ----------

function deadLettersPage(root, rest) {
  const [vhost, ...q] = rest;
  const name = q.join("/");
  const base = `/api/wharf/dead-letters/${qpath(vhost, name)}`;
  root.append(el("h1", {}, "Dead letters in ", el("q", { text: name })),
    el("p", {}, "Virtual host ", el("code", { text: vhost }), " · ", queueLink(vhost, name)),
    el("p", { text: "Messages grouped by why and where they died (their newest x-death). Moving a message back republishes it to its original exchange and routing key, x-death kept: in one step, so it is never lost or duplicated." }),
    el("div", { id: "dl-out", "aria-live": "polite" }, "Loading…"),
    el("div", { id: "dl-confirm" }));
  const load = async () => {
    const d = await api("GET", base);
    const groups = d.groups.map((g, gi) => {
      const boxes = g.messages.map((id) => el("li", {},
        el("input", { type: "checkbox", id: `dl-${id}`, value: id, class: "dl-pick" }), " ",
        el("label", { for: `dl-${id}`, text: `message ${id}` }), " · ",
        el("a", { href: timelineHref(vhost, id), text: "timeline" })));
      return el("section", { class: "dl-group", "aria-labelledby": `dl-g${gi}` },
        el("h2", { id: `dl-g${gi}` }, `${g.reason} in `, queueLink(vhost, g.queue), ` · ${fmtNum(g.count)} message${g.count === 1 ? "" : "s"}`),
        el("p", { text: `Original route: exchange ${g.exchange === "" ? "(default)" : g.exchange}, routing keys ${g.routing_keys.join(", ")}` }),
        el("button", { type: "button", onclick: () => { for (const b of boxes) b.querySelector("input").checked = true; } }, "Select all in this group"),
        el("ul", { class: "dl-messages" }, boxes));
    });
    $("#dl-out").replaceChildren(
      el("p", { text: `${fmtNum(d.messages_ready)} ready; ${fmtNum(d.examined)} examined from the head of the queue.` }),
      ...(groups.length ? groups : [el("p", { text: "No dead-lettered messages here." })]),
      d.not_dead_lettered.length ? el("p", { text: `${d.not_dead_lettered.length} message(s) here never died (no x-death): they cannot move back.` }) : "",
      el("p", {},
        el("button", { type: "button", id: "dl-move-selected", onclick: () => ask([...document.querySelectorAll(".dl-pick:checked")].map((b) => Number(b.value))) }, "Move selected back"), " ",
        el("button", { type: "button", id: "dl-move-all", onclick: () => ask(null) }, "Move all back")));
  };
  // The confirmation step: says what will happen, then waits for an explicit yes.
  const ask = (ids) => {
    if (ids && !ids.length) return say("Select messages to move back first.", true);
    const what = ids ? `${ids.length} selected message${ids.length === 1 ? "" : "s"}` : "every dead-lettered message";
    const box = el("div", { role: "alertdialog", "aria-labelledby": "dl-ask", class: "confirm" },
      el("p", { id: "dl-ask", text: `Move ${what} of ${name} back to their original exchange and routing key?` }),
      el("button", { type: "button", id: "dl-confirm-yes", onclick: () => move(ids) }, "Yes, move them back"), " ",
      el("button", { type: "button", id: "dl-confirm-no", onclick: () => $("#dl-confirm").replaceChildren() }, "Cancel"));
    $("#dl-confirm").replaceChildren(box);
    $("#dl-confirm-yes").focus();
  };
  const move = async (ids) => {
    $("#dl-confirm").replaceChildren();
    try {
      const r = await api("POST", `${base}/move-back`, ids ? { messages: ids } : { all: true });
      const stayed = r.skipped.map((s) => s.reason).join("; ");
      say(`Moved ${r.moved.length} message${r.moved.length === 1 ? "" : "s"} back.` + (r.skipped.length ? ` ${r.skipped.length} stayed: ${stayed}` : ""));
      await load();
    } catch (e) { fail(e); }
  };
  load().catch(fail);
}

registerPage("message", timelinePage);
registerPage("dead-letters", deadLettersPage);
