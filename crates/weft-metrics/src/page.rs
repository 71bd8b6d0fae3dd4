//! The status page the metadata manager serves at `/` of its metrics endpoint: one
//! self-contained HTML file (no external scripts, styles or fonts) whose script reads
//! `/api/top.json` (a `top::View`) every second and shows what `weft top` shows.

/// Where the page reads the view.
pub const VIEW_PATH: &str = "/api/top.json";

/// The page. Every server is a row `<tr id="server-N">`; the state cell has class
/// `state`.
pub const HTML: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Weft status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 1.3em; margin: 0 0 .2em; }
 #summary { color: #555; margin-bottom: 1em; }
 table { border-collapse: collapse; margin-bottom: 1.5em; }
 th, td { padding: .25em .7em; text-align: right; border-bottom: 1px solid #ddd; }
 th:first-child, th:nth-child(2), td:first-child, td.roles, td.state, td.name { text-align: left; }
 th { background: #f3f3f3; }
 tr.down td { color: #a00; }
 tfoot td { font-weight: bold; }
 #error { color: #a00; }
</style>
</head>
<body>
<h1>Weft status: <span id="cluster">…</span></h1>
<div id="summary">loading…</div>
<div id="error"></div>
<table id="servers">
<thead><tr><th>server</th><th>roles</th><th>read/s</th><th>write/s</th><th>ops/s</th><th>latency ms</th>
<th>in flight</th><th>connections</th><th>cache hit %</th><th>dirty</th><th>errors/s</th><th>state</th></tr></thead>
<tbody></tbody>
<tfoot><tr><td>all</td><td></td><td id="all-read"></td><td id="all-write"></td><td id="all-ops"></td><td colspan="7"></td></tr></tfoot>
</table>
<h2>Busiest files</h2>
<table id="files"><thead><tr><th>inode</th><th>bytes/s</th></tr></thead><tbody></tbody></table>
<h2>Busiest jobs</h2>
<table id="jobs"><thead><tr><th>job</th><th>bytes/s</th><th>requests/s</th></tr></thead><tbody></tbody></table>
<noscript>This page needs JavaScript; <a href="/api/top.json">the view as JSON</a> does not.</noscript>
<script>
"use strict";
function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return (u === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[u];
}
function num(n, digits) { return (n === null || n === undefined) ? "-" : n.toFixed(digits); }
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}
function fill(id, rows, make) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const r of rows) body.appendChild(make(r));
}
function show(view) {
  document.getElementById("cluster").textContent = view.cluster;
  let read = 0, write = 0, ops = 0, up = 0;
  fill("servers", view.servers, s => {
    const tr = document.createElement("tr");
    tr.id = "server-" + s.id;
    const isUp = s.state === "up";
    if (isUp) up++; else tr.className = "down";
    read += s.read_bytes_per_second; write += s.written_bytes_per_second; ops += s.requests_per_second;
    cell(tr, s.id);
    cell(tr, s.roles, "roles");
    cell(tr, isUp ? bytes(s.read_bytes_per_second) + "/s" : "-");
    cell(tr, isUp ? bytes(s.written_bytes_per_second) + "/s" : "-");
    cell(tr, isUp ? num(s.requests_per_second, 0) : "-");
    cell(tr, num(s.latency_ms, 2));
    cell(tr, isUp ? num(s.in_flight, 0) : "-");
    cell(tr, isUp ? num(s.connections, 0) : "-");
    cell(tr, num(s.hit_rate_percent, 1));
    cell(tr, s.dirty_bytes === null ? "-" : bytes(s.dirty_bytes));
    cell(tr, isUp ? num(s.errors_per_second, 0) : "-");
    cell(tr, s.state, "state");
    return tr;
  });
  document.getElementById("all-read").textContent = bytes(read) + "/s";
  document.getElementById("all-write").textContent = bytes(write) + "/s";
  document.getElementById("all-ops").textContent = ops.toFixed(0);
  document.getElementById("summary").textContent =
    up + " of " + view.servers.length + " servers up; rates over " + view.interval_seconds.toFixed(1) +
    " s; updated " + new Date().toLocaleTimeString();
  fill("files", view.files, f => {
    const tr = document.createElement("tr");
    cell(tr, f.inode, "name"); cell(tr, bytes(f.bytes_per_second) + "/s");
    return tr;
  });
  fill("jobs", view.jobs, j => {
    const tr = document.createElement("tr");
    cell(tr, j.job, "name"); cell(tr, bytes(j.bytes_per_second) + "/s"); cell(tr, num(j.requests_per_second, 0));
    return tr;
  });
}
async function refresh() {
  try {
    const reply = await fetch("/api/top.json", { cache: "no-store" });
    if (!reply.ok) throw new Error("the manager answered " + reply.status);
    show(await reply.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot read the cluster's state: " + e.message;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script>
</body>
</html>
"##;
