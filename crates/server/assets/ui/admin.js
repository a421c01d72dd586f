// The Exchanges and Admin pages (loaded after app.js, whose helpers they use), calling
// RabbitMQ's management API as RabbitMQ's UI does: exchanges (list, declare, delete,
// bindings in and out, publish), users, permissions, vhosts, policies and operator policies,
// definitions export and import. The server decides who may change what (S-MGMT-1); a
// refusal shows in the status line.
"use strict";

// ---------- shared ----------

// A JSON object typed in a textarea, or an Error naming the field.
function jsonField(id, what) {
  const text = $("#" + id).value.trim();
  try {
    const v = text ? JSON.parse(text) : {};
    if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
    return v;
  } catch (e) { throw new Error(`${what} must be a JSON object: ${e.message}`); }
}

// A labelled form control in a paragraph: `control` is an element whose id the label names.
function field(label, control) {
  return el("p", {}, el("label", { for: control.id }, label + " "), control);
}

// A form with a legend whose submit runs `action` (async); errors go to the status line.
function actionForm(id, legend, controls, submit, action) {
  const f = el("form", { id }, el("fieldset", {}, el("legend", { text: legend }), ...controls,
    el("p", {}, el("button", { type: "submit", text: submit }))));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try { await action(); } catch (e) { fail(e instanceof ApiError ? e : new Error(e.message)); }
  });
  return f;
}

// A button that asks, then runs `action` and says `done`.
function confirmButton(label, ariaLabel, question, action, done) {
  return el("button", { type: "button", class: "danger", "aria-label": ariaLabel, onclick: async () => {
    if (!confirm(question)) return;
    try { await action(); say(done); } catch (e) { fail(e); }
  } }, label);
}

const vhostInput = (id) => el("input", { id, value: "/", required: true });
const exchangePath = (vhost, name) => qpath(vhost, name === "" ? "amq.default" : name);

// ---------- exchanges ----------

function exchangeLink(vhost, name) {
  return el("a", { href: `#/exchanges/${exchangePath(vhost, name)}`, text: name === "" ? "(AMQP default)" : name });
}

function exchangesPage(root) {
  listing(root, {
    title: "Exchanges", path: "/api/exchanges", sortDefault: "name",
    columns: ["name", "vhost", "type", "durable", "auto_delete", "internal", "policy"],
    headers: [{ label: "Name", sort: "name" }, { label: "Virtual host", sort: "vhost" }, { label: "Type", sort: "type" },
      "Durable", "Auto-delete", "Internal", "Policy"],
    row: (x) => [exchangeLink(x.vhost, x.name), x.vhost, x.type, x.durable ? "yes" : "no", x.auto_delete ? "yes" : "no",
      x.internal ? "yes" : "no", x.policy || ""],
    extra: exchangeDeclareForm(),
  });
}

function exchangeDeclareForm() {
  const type = el("select", { id: "dx-type" }, ["direct", "fanout", "topic", "headers", "x-delayed-message"]
    .map((t) => el("option", { value: t, text: t })));
  return actionForm("exchange-form", "Add an exchange", [
    field("Virtual host", vhostInput("dx-vhost")),
    field("Name", el("input", { id: "dx-name", required: true })),
    field("Type", type),
    field("Durability", el("select", { id: "dx-durable" }, el("option", { value: "true", text: "Durable" }),
      el("option", { value: "false", text: "Transient" }))),
    el("p", {}, el("label", { class: "check", for: "dx-autodelete" }, el("input", { id: "dx-autodelete", type: "checkbox" }), " Auto-delete")),
    el("p", {}, el("label", { class: "check", for: "dx-internal" }, el("input", { id: "dx-internal", type: "checkbox" }), " Internal")),
    field("Arguments (a JSON object, for example {\"alternate-exchange\": \"unrouted\"} or {\"x-delayed-type\": \"direct\"})",
      el("textarea", { id: "dx-args", rows: 2 }, "{}")),
  ], "Add exchange", async () => {
    const args = jsonField("dx-args", "Arguments");
    const vhost = $("#dx-vhost").value, name = $("#dx-name").value;
    await api("PUT", `/api/exchanges/${qpath(vhost, name)}`, { type: type.value, durable: $("#dx-durable").value === "true",
      auto_delete: $("#dx-autodelete").checked, internal: $("#dx-internal").checked, arguments: args });
    say(`Exchange ${name} declared.`);
  });
}

function bindingsTable(caption, id, vhost, bindings, outgoing) {
  return table(caption, [outgoing ? "To" : "From", "Kind", "Routing key", "Arguments", "Unbind"], bindings.map((b) => {
    const kind = b.destination_type === "exchange" ? "e" : "q";
    const other = outgoing ? b.destination : b.source;
    const link = outgoing && kind === "q" ? queueLink(vhost, other) : exchangeLink(vhost, other);
    const path = `/api/bindings/${enc(vhost)}/e/${enc(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`;
    return [link, b.destination_type, b.routing_key, JSON.stringify(b.arguments || {}),
      confirmButton("Unbind", `Unbind ${b.source} from ${b.destination} (${b.routing_key})`,
        `Remove the binding from ${b.source} to ${b.destination}?`, () => api("DELETE", path), "Binding removed.")];
  }), { id, empty: "No bindings." });
}

function exchangePage(root, vhost, name) {
  const base = `/api/exchanges/${exchangePath(vhost, name)}`;
  const shown = name === "" ? "(AMQP default)" : name;
  root.append(el("h1", {}, "Exchange ", el("q", { text: shown })),
    el("p", {}, "Virtual host ", el("code", { text: vhost }), " · ", el("a", { href: "#/exchanges", text: "All exchanges" })),
    el("div", { id: "exchange-facts" }, "Loading…"), el("div", { id: "bindings-out" }), el("div", { id: "bindings-in" }),
    el("div", { id: "exchange-scheduled" }));
  const bind = actionForm("bind-form", "Add a binding from this exchange", [
    field("To", el("select", { id: "bind-kind" }, el("option", { value: "q", text: "Queue" }), el("option", { value: "e", text: "Exchange" }))),
    field("Name", el("input", { id: "bind-dest", required: true })),
    field("Routing key", el("input", { id: "bind-key" })),
    field("Arguments (JSON object)", el("textarea", { id: "bind-args", rows: 2 }, "{}")),
  ], "Bind", async () => {
    const args = jsonField("bind-args", "Arguments");
    const dest = $("#bind-dest").value;
    await api("POST", `/api/bindings/${enc(vhost)}/e/${enc(name)}/${$("#bind-kind").value}/${enc(dest)}`,
      { routing_key: $("#bind-key").value, arguments: args });
    say(`Bound to ${dest}.`);
  });
  const publish = actionForm("xpub-form", "Publish a message", [
    field("Routing key", el("input", { id: "xpub-key" })),
    field("Delivery mode", el("select", { id: "xpub-mode" }, el("option", { value: "2", text: "Persistent" }),
      el("option", { value: "1", text: "Non-persistent" }))),
    field("Headers (JSON object, for example {\"x-delay\": 5000} on a delayed exchange)", el("textarea", { id: "xpub-headers", rows: 2 }, "{}")),
    field("Properties (JSON object)", el("textarea", { id: "xpub-props", rows: 2 }, "{}")),
    field("Payload", el("textarea", { id: "xpub-payload", rows: 4 })),
  ], "Publish message", async () => {
    const props = jsonField("xpub-props", "Properties");
    props.headers = jsonField("xpub-headers", "Headers");
    props.delivery_mode = Number($("#xpub-mode").value);
    const r = await api("POST", `${base}/publish`, { routing_key: $("#xpub-key").value, properties: props,
      payload: $("#xpub-payload").value, payload_encoding: "string" });
    say(r.routed ? "Message published and routed." : "Message published, but not routed.");
  });
  const remove = el("p", {}, confirmButton("Delete exchange", `Delete exchange ${shown}`, `Delete exchange ${shown}?`,
    async () => { await api("DELETE", base); location.hash = "#/exchanges"; }, `Exchange ${shown} deleted.`));
  root.append(bind, publish, remove);
  poll(async () => {
    const [x, out, into] = await Promise.all([api("GET", base), api("GET", `${base}/bindings/source`),
      api("GET", `${base}/bindings/destination`)]);
    $("#exchange-facts").replaceChildren(facts([
      ["Type", x.type], ["Durable", x.durable ? "yes" : "no"], ["Auto-delete", x.auto_delete ? "yes" : "no"],
      ["Internal", x.internal ? "yes" : "no"], ["Policy", x.policy || "none"],
      ["Arguments", el("code", { text: JSON.stringify(x.arguments || {}) })],
    ]));
    $("#bindings-out").replaceChildren(bindingsTable("Bindings from this exchange", "bindings-out-table", vhost, out, true));
    $("#bindings-in").replaceChildren(bindingsTable("Bindings to this exchange", "bindings-in-table", vhost, into, false));
    if (x.type === "x-delayed-message") {
      const s = await api("GET", `/api/wharf/exchanges/${exchangePath(vhost, name)}/scheduled?count=50`);
      $("#exchange-scheduled").replaceChildren(table(`Scheduled messages waiting here: ${s.total_complete ? "" : "at least "}${fmtNum(s.total)}`,
        ["Due", "Routing key", "Message id", { label: "Size", num: true }],
        s.messages.map((m) => [fmtTime(m.due), m.routing_key, (m.properties && m.properties.message_id) || "", fmtBytes(m.payload_bytes)]),
        { id: "exchange-scheduled-table", empty: "No scheduled messages." }));
    }
  });
}

registerPage("exchanges", (root, rest) => rest.length >= 2 ? exchangePage(root, rest[0], rest.slice(1).join("/")) : exchangesPage(root));

// ---------- admin ----------

const ADMIN_SECTIONS = [
  ["users", "Users"], ["permissions", "Permissions"], ["vhosts", "Virtual hosts"], ["policies", "Policies"],
  ["operator-policies", "Operator policies"], ["definitions", "Definitions"],
];

// A polled table of a small, unpaged list (`path` answers an array).
function pollTable(out, path, caption, id, headers, row) {
  poll(async () => {
    const items = await api("GET", path);
    out.replaceChildren(table(caption, headers, items.map(row), { id }));
  });
}

function usersSection(root) {
  const out = el("div");
  const tags = (u) => (Array.isArray(u.tags) ? u.tags.join(", ") : u.tags || "");
  root.append(out, actionForm("user-form", "Add or update a user", [
    field("Username", el("input", { id: "user-name", required: true, autocomplete: "off" })),
    field("Password", el("input", { id: "user-pass", type: "password", autocomplete: "new-password" })),
    field("Tags (comma separated: administrator, monitoring, policymaker, management)", el("input", { id: "user-tags" })),
  ], "Save user", async () => {
    const name = $("#user-name").value;
    const body = { tags: $("#user-tags").value };
    if ($("#user-pass").value) body.password = $("#user-pass").value;
    else {
      // Tags only: keep the user's password as it is (its stored hash), as RabbitMQ's UI does.
      const existing = await api("GET", `/api/users/${enc(name)}`).catch(() => null);
      if (!existing) throw new Error(`A new user needs a password.`);
      body.password_hash = existing.password_hash;
    }
    await api("PUT", `/api/users/${enc(name)}`, body);
    $("#user-pass").value = "";
    say(`User ${name} saved.`);
  }));
  pollTable(out, "/api/users", "Users", "users-table", ["Name", "Tags", "Delete"], (u) => [u.name, tags(u),
    confirmButton("Delete", `Delete user ${u.name}`, `Delete user ${u.name}?`, () => api("DELETE", `/api/users/${enc(u.name)}`), `User ${u.name} deleted.`)]);
}

function permissionsSection(root) {
  const out = el("div");
  root.append(out, actionForm("permission-form", "Set permissions", [
    field("User", el("input", { id: "perm-user", required: true })),
    field("Virtual host", vhostInput("perm-vhost")),
    field("Configure regexp", el("input", { id: "perm-configure", value: ".*" })),
    field("Write regexp", el("input", { id: "perm-write", value: ".*" })),
    field("Read regexp", el("input", { id: "perm-read", value: ".*" })),
  ], "Set permission", async () => {
    const user = $("#perm-user").value, vhost = $("#perm-vhost").value;
    await api("PUT", `/api/permissions/${enc(vhost)}/${enc(user)}`,
      { configure: $("#perm-configure").value, write: $("#perm-write").value, read: $("#perm-read").value });
    say(`Permissions of ${user} on ${vhost} set.`);
  }));
  pollTable(out, "/api/permissions", "Permissions", "permissions-table", ["User", "Virtual host", "Configure", "Write", "Read", "Clear"],
    (p) => [p.user, p.vhost, p.configure, p.write, p.read,
      confirmButton("Clear", `Clear permissions of ${p.user} on ${p.vhost}`, `Clear the permissions of ${p.user} on ${p.vhost}?`,
        () => api("DELETE", `/api/permissions/${enc(p.vhost)}/${enc(p.user)}`), "Permissions cleared.")]);
}

function vhostsSection(root) {
  const out = el("div");
  root.append(out, actionForm("vhost-form", "Add a virtual host", [
    field("Name", el("input", { id: "vhost-name", required: true })),
  ], "Add virtual host", async () => {
    const name = $("#vhost-name").value;
    await api("PUT", `/api/vhosts/${enc(name)}`, {});
    say(`Virtual host ${name} added.`);
  }));
  pollTable(out, "/api/vhosts", "Virtual hosts", "vhosts-table", ["Name", { label: "Messages", num: true }, "Delete"],
    (v) => [v.name, fmtNum(v.messages), confirmButton("Delete", `Delete virtual host ${v.name}`,
      `Delete virtual host ${v.name} and everything in it?`, () => api("DELETE", `/api/vhosts/${enc(v.name)}`), `Virtual host ${v.name} deleted.`)]);
}

// Policies and operator policies: one form and table over `/api/<kind>`.
function policiesSection(root, kind, title) {
  const out = el("div");
  const p = kind === "policies" ? "pol" : "opol";
  root.append(out, actionForm(`${p}-form`, kind === "policies" ? "Add or update a policy" : "Add or update an operator policy", [
    field("Virtual host", vhostInput(`${p}-vhost`)),
    field("Name", el("input", { id: `${p}-name`, required: true })),
    field("Pattern (a regular expression on names)", el("input", { id: `${p}-pattern`, required: true })),
    field("Apply to", el("select", { id: `${p}-apply` }, ["all", "queues", "exchanges"].map((a) => el("option", { value: a, text: a })))),
    field("Priority", el("input", { id: `${p}-priority`, type: "number", value: 0 })),
    field("Definition (a JSON object, for example {\"message-ttl\": 60000, \"max-length\": 1000})",
      el("textarea", { id: `${p}-definition`, rows: 3 }, "{}")),
  ], "Save policy", async () => {
    const definition = jsonField(`${p}-definition`, "Definition");
    const vhost = $(`#${p}-vhost`).value, name = $(`#${p}-name`).value;
    await api("PUT", `/api/${kind}/${qpath(vhost, name)}`, { pattern: $(`#${p}-pattern`).value,
      "apply-to": $(`#${p}-apply`).value, priority: Number($(`#${p}-priority`).value), definition });
    say(`Policy ${name} saved.`);
  }));
  pollTable(out, `/api/${kind}`, title, `${kind}-table`,
    ["Name", "Virtual host", "Pattern", "Apply to", "Definition", { label: "Priority", num: true }, "Delete"],
    (x) => [x.name, x.vhost, x.pattern, x["apply-to"], el("code", { text: JSON.stringify(x.definition) }), fmtNum(x.priority),
      confirmButton("Delete", `Delete policy ${x.name}`, `Delete policy ${x.name}?`,
        () => api("DELETE", `/api/${kind}/${qpath(x.vhost, x.name)}`), `Policy ${x.name} deleted.`)]);
}

function definitionsSection(root) {
  const text = el("textarea", { id: "defs-text", rows: 14 });
  const exportButton = el("button", { type: "button", id: "defs-export", onclick: async () => {
    try {
      const defs = await api("GET", "/api/definitions");
      text.value = JSON.stringify(defs, null, 2);
      const link = el("a", { id: "defs-download", download: "wharf-definitions.json",
        href: "data:application/json;charset=utf-8," + enc(text.value) }, "Download definitions.json");
      $("#defs-link").replaceChildren(link);
      say("Definitions exported.");
    } catch (e) { fail(e); }
  } }, "Export definitions");
  const importForm = actionForm("defs-import", "Import definitions", [
    field("Definitions file", el("input", { id: "defs-file", type: "file", accept: "application/json,.json",
      onchange: async (ev) => { const f = ev.target.files[0]; if (f) text.value = await f.text(); } })),
  ], "Import definitions", async () => {
    if (!confirm("Import these definitions into the broker?")) return;
    await api("POST", "/api/definitions", JSON.parse(text.value));
    say("Definitions imported.");
  });
  root.append(el("p", {}, exportButton, " ", el("span", { id: "defs-link" })),
    el("p", {}, el("label", { for: "defs-text" }, "Definitions (JSON): exported ones appear here; edit or paste, then import")), text, importForm);
}

function adminPage(root, rest) {
  const section = ADMIN_SECTIONS.some(([k]) => k === rest[0]) ? rest[0] : "users";
  const title = ADMIN_SECTIONS.find(([k]) => k === section)[1];
  root.append(el("h1", { text: "Admin: " + title }),
    el("nav", { "aria-label": "Admin" }, el("ul", {}, ADMIN_SECTIONS.map(([k, label]) =>
      el("li", {}, el("a", { href: `#/admin/${k}`, "aria-current": k === section ? "page" : null, text: label }))))));
  const body = el("div", { id: "admin-body" });
  root.append(body);
  ({
    users: () => usersSection(body),
    permissions: () => permissionsSection(body),
    vhosts: () => vhostsSection(body),
    policies: () => policiesSection(body, "policies", "Policies"),
    "operator-policies": () => policiesSection(body, "operator-policies", "Operator policies"),
    definitions: () => definitionsSection(body),
  })[section]();
}

registerPage("admin", adminPage);
