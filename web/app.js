// The Settings page: reads the daemon's API with the session cookie the login link
// set, and shows the Overview. It never asks for, holds or shows a token.
"use strict";

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try { message = (await r.json()).error || message; } catch (_) { /* not JSON */ }
    throw new Error(path + ": " + message);
  }
  return r.json();
}

function item(list, text, id) {
  const li = document.createElement("li");
  li.textContent = text;
  if (id) li.id = id;
  list.appendChild(li);
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  row.appendChild(td);
}

async function load() {
  const section = document.getElementById("overview");
  const facts = document.getElementById("facts");
  try {
    const [status, sessions, terminals] = await Promise.all([
      getJSON("/api/status"),
      getJSON("/api/sessions"),
      getJSON("/api/terminals"),
    ]);
    facts.replaceChildren();
    item(facts, "relay " + status.version, "fact-version");
    item(facts, "Config dir: " + status.paths.config, "fact-config");
    if (status.paths.claude_token_file) {
      item(facts, "Claude token file: " + status.paths.claude_token_file, "fact-token-file");
    }
    if (status.settings && !status.settings.ok) {
      const p = document.getElementById("problem");
      p.textContent = "Settings: " + status.settings.note;
      p.hidden = false;
    }
    const live = sessions.sessions.concat(terminals.terminals)
      .filter((e) => e.state === "running" || e.state === "launching");
    const body = document.querySelector("#live tbody");
    body.replaceChildren();
    for (const e of live) {
      const row = document.createElement("tr");
      cell(row, e.id);
      cell(row, e.kind === "claude" ? "session" : "terminal");
      cell(row, e.template_id);
      cell(row, e.project_id);
      cell(row, e.state);
      body.appendChild(row);
    }
    document.getElementById("none").hidden = live.length > 0;
    section.dataset.ready = "1";
  } catch (err) {
    facts.replaceChildren();
    item(facts, "Could not load: " + err.message, "fact-error");
    section.dataset.ready = "error";
  }
}

load();
