// The Settings page: reads the daemon's API with the session cookie the login link
// set (GET requests only; docs/routes.md, "The Settings page and its login"). It shows
// the Overview, every session and terminal (kept current from /api/events), the sandbox
// of the one picked (#sandbox=ID), relay doctor's checks and the last audit rows. It
// never asks for, holds or shows a token, and nothing on it starts, stops or types
// into a session: it has no forms and no buttons, only links.
"use strict";

// The audit rows one page of the table holds: the page asks for the newest page at
// load, for the rows since the newest it shows at each event, and for the page before
// the oldest it shows when "Older rows" is followed; never the whole log.
const AUDIT_ROWS = 25;
// The rows shown, newest first, and how many the table may hold.
let auditRows = [];
let auditLimit = AUDIT_ROWS;
// How long one poll of /api/events waits for the next event.
const POLL_MS = 25000;
let entries = [];

async function getJSON(path) {
  const r = await fetch(path, { method: "GET", credentials: "same-origin", cache: "no-store" });
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try { message = (await r.json()).error || message; } catch (_) { /* not JSON */ }
    throw new Error(path + ": " + message);
  }
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function item(list, text, id) {
  const li = el("li", text);
  if (id) li.id = id;
  list.appendChild(li);
}

function cell(row, text, cls) {
  const td = el("td", text == null ? "" : text, cls);
  row.appendChild(td);
  return td;
}

function age(ms) {
  let s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
  if (s < 60) return s + "s";
  let m = Math.floor(s / 60); s %= 60;
  if (m < 60) return m + "m " + s + "s";
  let h = Math.floor(m / 60); m %= 60;
  if (h < 48) return h + "h " + m + "m";
  return Math.floor(h / 24) + "d " + (h % 24) + "h";
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

async function overview() {
  const facts = document.getElementById("facts");
  const status = await getJSON("/api/status");
  facts.replaceChildren();
  item(facts, "relay " + status.version, "fact-version");
  item(facts, "Config dir: " + status.paths.config, "fact-config");
  if (status.paths.claude_token_file) {
    item(facts, "Claude token file: " + status.paths.claude_token_file, "fact-token-file");
  }
  item(facts, "Running: " + status.sessions_running, "fact-running");
  const p = document.getElementById("problem");
  if (status.settings && !status.settings.ok) {
    p.textContent = "Settings: " + status.settings.note;
    p.hidden = false;
  } else {
    p.hidden = true;
  }
}

// Which token, by fingerprint, and the project's account label: "3f2a9c0d11be · work".
function tokenText(x) {
  return [x.token_fingerprint, x.account].filter(Boolean).join(" · ");
}

async function sessions() {
  const [s, t] = await Promise.all([getJSON("/api/sessions"), getJSON("/api/terminals")]);
  entries = s.sessions.concat(t.terminals).sort((a, b) => a.created_ms - b.created_ms);
  const body = document.querySelector("#live tbody");
  body.replaceChildren();
  const picked = pickedId();
  for (const e of entries) {
    const row = document.createElement("tr");
    row.dataset.id = e.id;
    row.dataset.state = e.state;
    if (e.id === picked) row.className = "selected";
    const id = cell(row, "", "mono");
    const link = el("a", e.id);
    link.href = "#sandbox=" + encodeURIComponent(e.id);
    id.appendChild(link);
    // The label it was started with (`--name`), if any.
    cell(row, e.name || "");
    cell(row, e.kind === "claude" ? "session" : "terminal");
    cell(row, e.template_id);
    cell(row, e.project_id);
    cell(row, e.state + (e.stale ? " (stale)" : ""), "st-" + e.state);
    cell(row, e.directory, "path");
    cell(row, e.model || (e.claude && e.claude.model) || "");
    cell(row, tokenText(e), "mono");
    const a = cell(row, age(e.created_ms), "age");
    a.dataset.created = String(e.created_ms);
    body.appendChild(row);
  }
  const none = document.getElementById("none");
  none.hidden = entries.some((e) => e.state === "running");
  none.textContent = entries.length ? "Nothing is running." : "No sessions or terminals.";
}

function tickAges() {
  for (const td of document.querySelectorAll("#live td.age")) {
    td.textContent = age(Number(td.dataset.created));
  }
}

function pickedId() {
  const m = /^#sandbox=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function places(parent, title, list, cls) {
  if (!list || !list.length) return;
  parent.appendChild(el("h3", title));
  const ul = el("ul", null, "places " + cls);
  for (const p of list) {
    const li = el("li", p.path + (p.written ? " (written " + p.written + ")" : "") + (p.kind === "missing" ? " [missing]" : ""));
    const why = [p.why, p.how].filter(Boolean).join("; ");
    if (why) li.appendChild(el("span", " — " + why, "why"));
    ul.appendChild(li);
  }
  parent.appendChild(ul);
}

async function sandbox() {
  const section = document.getElementById("sandbox");
  const body = document.getElementById("sandbox-body");
  const id = pickedId();
  for (const row of document.querySelectorAll("#live tbody tr")) {
    row.className = row.dataset.id === id ? "selected" : "";
  }
  if (!id) {
    body.replaceChildren();
    document.getElementById("sandbox-pick").hidden = false;
    return;
  }
  document.getElementById("sandbox-pick").hidden = true;
  section.dataset.ready = "0";
  const kind = id.startsWith("t-") ? "terminals" : "sessions";
  try {
    const x = await getJSON("/api/" + kind + "/" + encodeURIComponent(id) + "/sandbox");
    body.replaceChildren();
    const head = el("p", null, "mono");
    head.id = "sandbox-head";
    head.textContent = x.sandboxed
      ? id + ": " + x.backend + ", working directory " + x.workdir
      : id + ": not sandboxed, working directory " + x.workdir;
    body.appendChild(head);
    // Its network and connections first: what changes as it runs, above the lists of
    // places (the system's alone are some 40 lines) that were fixed at its launch.
    body.appendChild(el("h3", "Network"));
    const net = el("p", null, "network");
    net.id = "sandbox-network";
    net.textContent = x.network.mode === "proxied"
      ? "proxied; egress: " + ((x.network.egress || []).length ? x.network.egress.join(", ") : "nothing") +
        " — " + x.network.how
      : x.network.mode + "; denied ports: " +
        (x.network.denied_ports.length ? x.network.denied_ports.join(", ") : "none") +
        " — " + x.network.how;
    body.appendChild(net);
    if (x.network.mode === "proxied") await egress(body, kind, id);
    places(body, "Can read and write", x.write, "write");
    places(body, "Can read", x.read, "read");
    places(body, "Kept read-only inside those", x.read_only, "read-only");
    places(body, "Denied, after every grant", x.denied, "denied");
    places(body, "Sockets denied", x.denied_sockets, "sockets");
    places(body, "System (every sandbox of " + (x.backend || "this kind") + ")", x.system, "system");
    for (const n of x.notes || []) body.appendChild(el("p", "Note: " + n, "hint"));
    section.dataset.ready = "1";
  } catch (err) {
    body.replaceChildren(el("p", "Could not load: " + err.message));
    section.dataset.ready = "error";
  }
}

// The picked session's connections through its egress proxy, newest first: reloaded
// with the rest on every event, so each one shows as it closes.
async function egress(parent, kind, id) {
  const e = await getJSON("/api/" + kind + "/" + encodeURIComponent(id) + "/egress");
  parent.appendChild(el("h3", "Connections through its proxy"));
  if (!e.rows.length) {
    parent.appendChild(el("p", "None yet.", "hint"));
    return;
  }
  const table = el("table");
  table.id = "sandbox-egress";
  const head = el("tr");
  for (const h of ["Time", "Host", "Verdict", "Out", "In", "ms", "Rule"]) head.appendChild(el("th", h));
  table.appendChild(el("thead")).appendChild(head);
  const tbody = table.appendChild(el("tbody"));
  for (const r of e.rows.slice().reverse()) {
    const g = r.egress || {};
    const row = document.createElement("tr");
    cell(row, when(r.ts));
    cell(row, g.host + ":" + g.port, "mono");
    cell(row, g.allowed ? "allowed" : "refused", "st-" + (g.allowed ? "ok" : "fail"));
    cell(row, String(g.sent || 0));
    cell(row, String(g.received || 0));
    cell(row, String(g.ms || 0));
    cell(row, g.rule || "", "wrap");
    tbody.appendChild(row);
  }
  parent.appendChild(el("div", null, "scroll")).appendChild(table);
}

async function doctor() {
  const section = document.getElementById("doctor");
  const body = document.querySelector("#checks tbody");
  try {
    const report = await getJSON("/api/doctor");
    document.getElementById("probes-ran").textContent = report.probes_ran_ms
      ? "The probes ran " + when(report.probes_ran_ms) + "."
      : "The probes have not run yet: run relay doctor.";
    body.replaceChildren();
    for (const c of report.checks) {
      const row = document.createElement("tr");
      row.dataset.name = c.name;
      cell(row, c.status, "st-" + c.status);
      cell(row, c.name, "mono");
      cell(row, c.detail, "wrap");
      cell(row, c.fix || "", "wrap");
      body.appendChild(row);
    }
    section.dataset.ready = "1";
  } catch (err) {
    body.replaceChildren();
    const row = document.createElement("tr");
    cell(row, "Could not load: " + err.message, "wrap");
    body.appendChild(row);
    section.dataset.ready = "error";
  }
}

// Of `rows` (oldest first), those not shown yet: the ones at `ts` that the table
// already holds come first (`atStart`) or last, and are left out.
function unseen(rows, ts, atStart) {
  const shown = auditRows.filter((r) => r.ts === ts).length;
  let skip = 0;
  const at = (i) => rows[atStart ? i : rows.length - 1 - i];
  while (skip < shown && skip < rows.length && at(skip).ts === ts) skip++;
  return atStart ? rows.slice(skip) : rows.slice(0, rows.length - skip);
}

// The rows written since the newest shown (the newest page at load). A full page means
// more came than a page holds: the table starts again from it.
async function audit() {
  const newest = auditRows.length ? auditRows[0].ts : null;
  let path = "/api/audit?tail=" + AUDIT_ROWS;
  if (newest !== null) path += "&since=" + newest;
  const a = await getJSON(path);
  if (newest === null || a.rows.length >= AUDIT_ROWS) {
    auditRows = a.rows.slice().reverse();
  } else {
    auditRows = unseen(a.rows, newest, true).reverse().concat(auditRows);
  }
  auditRows = auditRows.slice(0, auditLimit);
  showAudit();
}

// "Older rows": the page before the oldest shown.
async function olderAudit(ev) {
  ev.preventDefault();
  if (!auditRows.length) return;
  const oldest = auditRows[auditRows.length - 1].ts;
  const a = await getJSON("/api/audit?tail=" + AUDIT_ROWS + "&until=" + oldest);
  const older = unseen(a.rows, oldest, false).reverse();
  auditLimit += older.length;
  auditRows = auditRows.concat(older);
  showAudit();
}

function showAudit() {
  const section = document.getElementById("audit");
  const body = document.querySelector("#audit-rows tbody");
  body.replaceChildren();
  for (const r of auditRows) {
    const row = document.createElement("tr");
    cell(row, when(r.ts));
    cell(row, r.action, "mono");
    cell(row, r.outcome, "st-" + (r.outcome === "allowed" ? "ok" : "fail"));
    cell(row, r.session_id || "", "mono");
    cell(row, r.template || "");
    cell(row, tokenText(r), "mono");
    cell(row, r.code || "", "mono");
    cell(row, note(r), "wrap");
    body.appendChild(row);
  }
  section.dataset.ready = "1";
}

// What a row says beyond its columns: a connection's host, port and rule ("×N" for a
// folded row); for a session that reached a limit, which, in words ("memory limit 64
// MiB reached"); else its error.
function note(r) {
  const g = r.egress;
  if (g) {
    return g.host + ":" + g.port + (g.folded ? " ×" + g.folded : "") + (g.rule ? " — " + g.rule : "");
  }
  const reached = r.limits && r.limits.reached;
  return reached ? (r.error || "") + ": " + reached : r.error || "";
}

async function refresh() {
  await Promise.all([overview(), sessions(), audit()]);
  if (pickedId()) await sandbox();
}

// Follows /api/events with a long poll: every event (a launch, an exit, a purge) reloads
// the lists and adds the new audit rows. A failed poll is tried again after a pause, without
// waiting for events, so the header says "live" again as soon as relay answers rather
// than a whole long poll later.
async function follow(after) {
  const state = document.getElementById("live-state");
  let wait = POLL_MS;
  for (;;) {
    try {
      const r = await getJSON("/api/events?after=" + after + "&wait_ms=" + wait);
      state.textContent = "live";
      wait = POLL_MS;
      if (r.events.length) {
        after = r.events[r.events.length - 1].seq;
        await refresh();
        state.dataset.seq = String(after);
      }
    } catch (err) {
      state.textContent = "reconnecting… (" + err.message + ")";
      wait = 0;
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
}

async function load() {
  const section = document.getElementById("overview");
  const state = document.getElementById("live-state");
  try {
    const first = await getJSON("/api/events?after=0");
    const after = first.events.length ? first.events[first.events.length - 1].seq : 0;
    // The page has its place in relay's events and follows them from here: live at
    // once, not when the first long poll comes back (up to POLL_MS later). The lists
    // it loads next are as new as that place, or newer.
    state.dataset.seq = String(after);
    state.textContent = "live";
    await refresh();
    section.dataset.ready = "1";
    window.addEventListener("hashchange", sandbox);
    document.getElementById("audit-older").addEventListener("click", olderAudit);
    setInterval(tickAges, 1000);
    doctor();
    follow(after);
  } catch (err) {
    const facts = document.getElementById("facts");
    facts.replaceChildren();
    item(facts, "Could not load: " + err.message, "fact-error");
    section.dataset.ready = "error";
    state.textContent = "not live (" + err.message + ")";
  }
}

load();
