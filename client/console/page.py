"""The console's one HTML page: inline CSS and JavaScript, no build step, no external resource.

Theory of operation: the page polls ``/api/cluster``, ``/api/topics``, ``/api/groups`` and
``/api/throughput`` every ``POLL_MS`` (the next poll starts when the previous one ended, so a
slow cluster never stacks requests) and rebuilds each section from its answer with DOM calls
(``textContent`` only, never ``innerHTML`` of cluster data: a topic or client id cannot inject
markup). An endpoint that fails leaves its section's last content and shows the error above it.
Charts are inline SVG polylines over the throughput history. Kept as a Python string so the
package ships it without package-data rules.
"""

from __future__ import annotations

__all__ = ["PAGE_HTML"]

_CSS = """
:root { --bg:#f4f6f9; --card:#fff; --ink:#1d2733; --mute:#6b7785; --line:#e3e8ee;
  --accent:#2f6fde; --out:#e0832f; --ok:#1f9d55; --warn:#d97706; --bad:#d64545; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
header { display:flex; align-items:center; gap:14px; padding:10px 20px; background:#17202b; color:#fff; }
header h1 { font-size:16px; margin:0; font-weight:600; letter-spacing:.3px; }
header h1 b { color:#7fb0ff; }
#cluster-id { color:#9fb0c3; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size:12px; }
#pills { display:flex; gap:8px; flex-wrap:wrap; margin-left:auto; }
.pill { padding:2px 9px; border-radius:11px; background:#2a3644; font-size:12px; white-space:nowrap; }
.pill.ok { background:#1e5133; } .pill.bad { background:#7a2626; }
#updated { color:#9fb0c3; font-size:12px; min-width:110px; text-align:right; }
main { display:grid; grid-template-columns: 7fr 5fr; gap:14px; padding:14px 20px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px;
  min-width:0; overflow-x:auto; }
.leads { display:grid; grid-template-columns: 70px 1fr; gap:4px 10px; align-items:center; margin-top:12px; font-size:12px; }
.leads .bar { height:10px; background:var(--accent); border-radius:2px; opacity:.8; }
h3 { font-size:12px; color:var(--mute); font-weight:600; margin:14px 0 0; }
.card.wide { grid-column: 1 / -1; }
.card h2 { font-size:13px; margin:0 0 8px; text-transform:uppercase; letter-spacing:.6px; color:var(--mute); }
.card h2 .sub { text-transform:none; letter-spacing:0; font-weight:400; margin-left:8px; }
table { border-collapse:collapse; width:100%; }
th { text-align:left; font-weight:600; color:var(--mute); font-size:12px; border-bottom:1px solid var(--line);
  padding:4px 8px 4px 0; }
td { padding:3px 8px 3px 0; border-bottom:1px solid #f0f2f5; vertical-align:top; }
td.num, th.num { text-align:right; font-variant-numeric: tabular-nums; }
tr.topic td { font-weight:600; background:#f8fafc; border-top:1px solid var(--line); }
.mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size:12px; }
.badge { display:inline-block; padding:0 7px; border-radius:9px; font-size:11px; margin-right:4px;
  background:#e8eef7; color:#34495e; }
.badge.ok { background:#dcf3e5; color:#17663a; } .badge.warn { background:#fdf0d5; color:#8a5a00; }
.badge.bad { background:#fbe0e0; color:#9b2323; } .badge.lead { background:#dde8fb; color:#1d4fa8; }
.err { color:var(--bad); margin:0 0 6px; font-size:12px; }
.err:empty { display:none; }
.muted { color:var(--mute); }
.group { border-top:1px solid var(--line); padding:8px 0 4px; }
.group:first-of-type { border-top:0; }
.ghead { display:flex; gap:12px; align-items:baseline; margin-bottom:4px; }
.ghead .name { font-weight:600; font-size:14px; }
.members { margin:2px 0 6px; color:#34495e; }
.lagbar { display:inline-block; height:8px; background:var(--out); border-radius:2px; vertical-align:middle;
  margin-left:6px; }
svg text { font-size:10px; fill:var(--mute); }
.legend { display:flex; gap:14px; font-size:12px; margin:2px 0 6px; }
.legend i { display:inline-block; width:14px; height:3px; vertical-align:middle; margin-right:5px; }
.charts { display:grid; grid-template-columns: 1fr; gap:4px; }
.charts svg { width:100%; display:block; }
td.roles { white-space:nowrap; }
#cluster td, #cluster th { padding-right:7px; }
"""

_BODY = """
<header>
  <h1><b>rafka</b> console</h1><span id="cluster-id"></span>
  <div id="pills"></div><span id="updated">connecting…</span>
</header>
<main>
  <section class="card" id="cluster"><h2>Cluster &amp; quorum<span class="sub" id="quorum-line"></span></h2>
    <p class="err" id="cluster-err"></p>
    <table><thead><tr><th>Node</th><th>Address</th><th>Role</th><th>Raft</th><th class="num">Offset</th>
      <th class="num">Lag</th><th class="num">Req/s</th><th class="num">Leads</th><th class="num">Conns</th>
      <th>Status</th></tr></thead><tbody id="brokers"></tbody></table>
    <h3>Partition leaders per broker</h3><div class="leads" id="leads"></div>
  </section>
  <section class="card" id="throughput"><h2>Throughput<span class="sub" id="tp-line"></span></h2>
    <p class="err" id="throughput-err"></p>
    <div class="legend"><span><i style="background:var(--accent)"></i>bytes in/s</span>
      <span><i style="background:var(--out)"></i>bytes out/s</span>
      <span><i style="background:#8a63d2"></i>requests/s</span></div>
    <div class="charts"><svg id="chart-bytes" height="150"></svg><svg id="chart-req" height="70"></svg></div>
  </section>
  <section class="card wide" id="topics"><h2>Topics<span class="sub" id="topics-line"></span></h2>
    <p class="err" id="topics-err"></p>
    <table><thead><tr><th>Topic / partition</th><th class="num">Leader</th><th>Replicas</th><th>ISR</th>
      <th class="num">Log start</th><th class="num">High watermark</th><th class="num">In/s</th>
      <th class="num">Out/s</th><th>Status</th></tr></thead><tbody id="topic-rows"></tbody></table>
  </section>
  <section class="card wide" id="groups"><h2>Consumer groups<span class="sub" id="groups-line"></span></h2>
    <p class="err" id="groups-err"></p><div id="group-list"></div>
  </section>
</main>
"""

_JS = r"""
const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false)
    e.append(k instanceof Node ? k : String(k));
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function fill(id, nodes) { $(id).replaceChildren(...nodes); }
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : String(Number(n.toFixed(1)))) + " " + u[i];
}
function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function badge(text, kind) { return h("span", {class: "badge " + (kind || "")}, text); }
async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

let rates = {};  // topic -> [in/s, out/s], from the last throughput answer

function renderCluster(c) {
  $("cluster-id").textContent = c.cluster_id ? "cluster " + c.cluster_id : "";
  const q = c.quorum;
  $("quorum-line").textContent = q ? `raft leader ${q.leader_id} · epoch ${q.epoch} · high watermark ${num(q.high_watermark)}`
                                   : "quorum: no answer";
  const voters = Object.fromEntries(((q && q.voters) || []).map((v) => [v.id, v]));
  fill("brokers", c.brokers.map((b) => {
    const m = b.metrics, v = voters[b.id];
    const roles = b.controller && b.raft_leader ? [badge("controller · raft leader", "lead")]
      : [b.controller ? badge("controller", "lead") : null, b.raft_leader ? badge("raft leader", "lead") : null,
         b.voter ? badge("voter") : badge("broker")];
    const status = m ? (m.up ? badge("up", "ok") : badge("metrics down", "bad"))
                     : (v && v.reachable === false ? badge("unreachable", "bad") : badge("up", "ok"));
    return h("tr", {}, h("td", {}, String(b.id)), h("td", {class: "mono"}, `${b.host}:${b.port}`), h("td", {class: "roles"}, roles), h("td", {class: "mono muted"}, v && v.raft ? v.raft.replace(b.host + ":", ":") : "–"),
      h("td", {class: "num"}, num(b.metadata_offset)), h("td", {class: "num"}, num(b.metadata_lag)),
      h("td", {class: "num"}, m ? m.request_rate.toFixed(1) : "–"),
      h("td", {class: "num"}, m ? num(m.leader_partitions) : "–"), h("td", {class: "num"}, m ? num(m.connections) : "–"),
      h("td", {}, status));
  }));
  const most = Math.max(1, ...c.brokers.map((b) => (b.metrics ? b.metrics.leader_partitions : 0)));
  fill("leads", c.brokers.flatMap((b) => {
    const n = b.metrics ? b.metrics.leader_partitions : 0;
    return [h("span", {}, `node ${b.id}`), h("span", {}, h("span", {class: "bar", style:
      `display:inline-block;vertical-align:middle;width:${Math.max(2, 70 * n / most)}%`}), ` ${b.metrics ? n : "–"}`)];
  }));
  return c;
}

function renderTopics(t) {
  const rows = [];
  for (const topic of t.topics) {
    const r = rates[topic.name] || [0, 0];
    rows.push(h("tr", {class: "topic"}, h("td", {colspan: 6}, topic.name + "  ",
      h("span", {class: "muted"}, `${topic.partitions.length} partitions · ${num(topic.records)} records`)),
      h("td", {class: "num"}, bytes(r[0])), h("td", {class: "num"}, bytes(r[1])), h("td", {})));
    for (const p of topic.partitions) {
      const st = p.offline ? badge("offline", "bad") : p.under_replicated ? badge("under-replicated", "warn") : badge("in sync", "ok");
      rows.push(h("tr", {}, h("td", {class: "mono"}, `  ${topic.name}-${p.partition}`),
        h("td", {class: "num"}, p.leader < 0 ? "none" : String(p.leader)), h("td", {class: "mono"}, p.replicas.join(", ")),
        h("td", {class: "mono"}, p.isr.join(", ")), h("td", {class: "num"}, num(p.log_start_offset)),
        h("td", {class: "num"}, num(p.high_watermark)), h("td", {}), h("td", {}), h("td", {}, st)));
    }
  }
  if (!t.topics.length) rows.push(h("tr", {}, h("td", {colspan: 9, class: "muted"}, "no topics yet")));
  fill("topic-rows", rows);
  $("topics-line").textContent = `${t.topics.length} topics · ${t.under_replicated} under-replicated · ${t.offline} offline`;
  return t;
}

function renderGroups(g) {
  const maxLag = Math.max(1, ...g.groups.flatMap((x) => x.partitions.map((p) => p.lag || 0)));
  fill("group-list", g.groups.map((grp) => {
    const kind = grp.state === "Stable" ? "ok" : grp.state === "Empty" ? "" : "warn";
    const members = grp.members.map((m) => h("div", {class: "mono"}, `${m.client_id || m.member_id}`,
      h("span", {class: "muted"}, ` ${m.client_host || ""} → `),
      m.assignment.map((a) => a.partitions.map((p) => `${a.topic}-${p}`).join(" ")).join(" ") || "nothing assigned"));
    const parts = grp.partitions.map((p) => h("tr", {}, h("td", {class: "mono"}, `${p.topic}-${p.partition}`),
      h("td", {class: "num"}, p.committed < 0 ? "–" : num(p.committed)), h("td", {class: "num"}, num(p.high_watermark)),
      h("td", {class: "num"}, p.lag === null ? "–" : num(p.lag)),
      h("td", {}, p.lag ? h("span", {class: "lagbar", style: `width:${Math.max(2, 160 * p.lag / maxLag)}px`}) : ""),
      h("td", {class: "mono muted"}, p.member_id ? p.member_id.slice(0, 12) : "–")));
    return h("div", {class: "group"},
      h("div", {class: "ghead"}, h("span", {class: "name"}, grp.group_id), badge(grp.state, kind),
        h("span", {class: "muted"}, `${grp.member_count} member${grp.member_count === 1 ? "" : "s"} · epoch ${grp.epoch ?? "–"}`),
        h("span", {}, "lag ", h("b", {}, num(grp.lag)))),
      grp.error ? h("p", {class: "err"}, grp.error) : null,
      h("div", {class: "members"}, members.length ? members : h("span", {class: "muted"}, "no members")),
      parts.length ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Partition"), h("th", {class: "num"}, "Committed"),
        h("th", {class: "num"}, "High watermark"), h("th", {class: "num"}, "Lag"), h("th", {}, ""), h("th", {}, "Member"))),
        h("tbody", {}, parts)) : null);
  }));
  if (!g.groups.length) fill("group-list", [h("p", {class: "muted"}, "no consumer groups yet")]);
  $("groups-line").textContent = `${g.groups.length} groups`;
  return g;
}

function nice(v) {
  if (v <= 0) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * e) return m * e;
  return 10 * e;
}
function niceBytes(v) {  // a round number of B, KiB, MiB…: axis labels like "40 KiB", not "48.8 KiB"
  const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(Math.max(v, 1)) / Math.log(1024))));
  return nice(v / unit) * unit;
}
function chart(el, samples, series, fmt, round) {
  const W = Math.max(200, el.getBoundingClientRect().width || el.parentNode.clientWidth || 560);
  const H = Number(el.getAttribute("height")), L = 62, R = 8, T = 6, B = 16;
  el.setAttribute("width", W); el.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const kids = [];
  const t1 = samples.length ? samples[samples.length - 1].t : Date.now() / 1000;
  const span = Math.min(300, Math.max(60, samples.length ? t1 - samples[0].t : 60));
  const t0 = t1 - span;
  const ymax = (round || nice)(Math.max(0, ...samples.flatMap((s) => series.map((se) => se.get(s)))));
  const x = (t) => L + (W - L - R) * (t - t0) / span, y = (v) => T + (H - T - B) * (1 - v / ymax);
  for (let i = 0; i <= 2; i++) {
    const v = ymax * i / 2;
    kids.push(svg("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e9edf2"}));
    const lab = svg("text", {x: L - 6, y: y(v) + 3, "text-anchor": "end"}); lab.textContent = fmt(v); kids.push(lab);
  }
  for (const [t, txt] of [[t0, `-${Math.round(span)}s`], [t1, "now"]]) {
    const lab = svg("text", {x: x(t), y: H - 3, "text-anchor": t === t0 ? "start" : "end"}); lab.textContent = txt;
    kids.push(lab);
  }
  for (const se of series) {
    const pts = samples.filter((s) => s.t >= t0).map((s) => `${x(s.t).toFixed(1)},${y(se.get(s)).toFixed(1)}`);
    if (pts.length) kids.push(svg("polyline", {points: pts.join(" "), fill: "none", stroke: se.color,
      "stroke-width": 2, "stroke-linejoin": "round"}));
  }
  el.replaceChildren(...kids);
}

function renderThroughput(tp) {
  rates = Object.fromEntries(tp.topics.map((t) => [t.topic, [t.in_rate, t.out_rate]]));
  const s = tp.samples, last = s[s.length - 1];
  chart($("chart-bytes"), s, [{get: (x) => x.bytes_in, color: "#2f6fde"}, {get: (x) => x.bytes_out, color: "#e0832f"}], bytes, niceBytes);
  chart($("chart-req"), s, [{get: (x) => x.requests, color: "#8a63d2"}], (v) => v.toFixed(v > 0 && v < 10 ? 1 : 0) + "/s");
  $("tp-line").textContent = last ? `in ${bytes(last.bytes_in)}/s · out ${bytes(last.bytes_out)}/s · ${last.requests.toFixed(1)} req/s`
                                  : "waiting for two metrics samples…";
  const up = tp.nodes.filter((n) => n.up).length;
  const pills = [h("span", {class: "pill " + (up === tp.nodes.length && up ? "ok" : "bad")}, `nodes ${up}/${tp.nodes.length}`)];
  for (const [label, v] of [["under-replicated", tp.under_replicated], ["offline", tp.offline_partitions],
                            ["fenced", tp.fenced_brokers]])
    if (v !== null) pills.push(h("span", {class: "pill " + (v ? "bad" : "ok")}, `${label} ${v}`));
  fill("pills", pills);
  return tp;
}

async function refresh() {
  const parts = [["throughput", "/api/throughput", renderThroughput], ["cluster", "/api/cluster", renderCluster],
                 ["topics", "/api/topics", renderTopics], ["groups", "/api/groups", renderGroups]];
  const fetched = await Promise.allSettled(parts.map(([, path]) => get(path)));
  let ok = 0;
  fetched.forEach((res, i) => {
    const [name, , render] = parts[i];
    if (res.status === "fulfilled") { render(res.value); $(name + "-err").textContent = ""; ok++; }
    else $(name + "-err").textContent = String(res.reason.message || res.reason);
  });
  $("updated").textContent = (ok === parts.length ? "updated " : "partly updated ") + new Date().toLocaleTimeString();
  document.body.dataset.loaded = "1";
}
async function loop() {
  try { await refresh(); } catch (e) { $("updated").textContent = "console unreachable"; }
  setTimeout(loop, POLL_MS);
}
loop();
"""

PAGE_HTML = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rafka console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_CSS}</style></head>
<body>{_BODY}
<script>{_JS}</script>
</body></html>
"""
