// The usage panel (GET /usage, issue 34): requests, tokens in and out, errors and p50/p95 duration
// per key, model, day or hour. Loaded before dashboard.js, which calls refreshUsage() on each refresh
// and initUsage() once; a key that sees only its own usage gets its own rows.
"use strict";

function usageMs(v) { return v == null ? "" : Math.round(v) + " ms"; }

function usageRow(r, total) {
  const cells = [r.group, r.requests, r.prompt_tokens, r.completion_tokens, r.errors, usageMs(r.p50_ms), usageMs(r.p95_ms)];
  return el("tr", { dataset: { group: total ? "" : r.group }, class: total ? "total" : "row" },
    ...cells.map((c) => el("td", {}, String(c))));
}

function renderUsage(data) {
  const body = $("#usage tbody");
  const rows = data.rows.map((r) => usageRow(r, false));
  if (data.total.requests) rows.push(usageRow(data.total, true));
  body.replaceChildren(...rows);
  $("#usage").dataset.groupBy = data.group_by || "";
  $("#usage-empty").hidden = data.total.requests > 0;
}

let usageAsked = 0; // the latest refresh: an older answer arriving after it (another grouping) is dropped

async function refreshUsage() {
  const asked = ++usageAsked;
  const params = new URLSearchParams({ group_by: $("#usage-group").value });
  const since = $("#usage-since").value;
  if (since) params.set("since", since);
  try {
    const data = await api("GET", "/usage?" + params);
    if (asked === usageAsked) renderUsage(data);
  } catch (err) { showError(err); }
}

function initUsage() {
  for (const id of ["#usage-group", "#usage-since"]) $(id).addEventListener("change", refreshUsage);
}
