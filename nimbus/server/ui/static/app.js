// Nimbus web UI: draws the snapshots this replica pushes over server-sent events.
// Read-only and dependency-free (no network beyond this replica): plain DOM and SVG.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2f5fd0", "#1f7a4d", "#b35c00", "#7b3fb8", "#b3261e", "#00758f", "#8a6d00"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function clock(ms) {
  return ms ? new Date(ms).toLocaleTimeString([], { hour12: false }) : "–";
}

function table(id, headers, rows, empty) {
  const head = el("tr", {}, headers.map(([label, cls]) => el("th", { class: cls }, label)));
  const body = rows.length
    ? rows
    : [el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, empty))];
  return el("table", { id }, el("thead", {}, head), el("tbody", {}, body));
}

function section(id, title, ...content) {
  return el("section", { id }, el("h2", {}, title), ...content);
}

function colorOf(key, keys) {
  return PALETTE[Math.max(0, keys.indexOf(key)) % PALETTE.length];
}

// -- banners and liveness ------------------------------------------------------------

function showBanners(snapshot) {
  document.getElementById("served-by").textContent = snapshot.served_by;
  const zk = document.getElementById("zk-banner");
  if (snapshot.zookeeper.connected) {
    zk.hidden = true;
  } else {
    zk.textContent =
      `This replica (${snapshot.served_by}) has lost ZooKeeper: what you see is its last ` +
      "known state and may be out of date. Another replica's page shows the live cluster.";
    zk.hidden = false;
  }
  const live = document.getElementById("live");
  live.textContent = `live · updated ${clock(snapshot.now_ms)}`;
  live.classList.toggle("stale", !snapshot.zookeeper.connected);
}

function connectionLost() {
  const banner = document.getElementById("conn-banner");
  banner.textContent =
    "Lost the connection to this replica's web server (it may be down); retrying…";
  banner.hidden = false;
  const live = document.getElementById("live");
  live.textContent = "disconnected";
  live.classList.add("stale");
}

function connectionBack() {
  document.getElementById("conn-banner").hidden = true;
}

// -- cluster page ----------------------------------------------------------------------

function leaderSection(c) {
  const leader = c.leader;
  return section(
    "leader",
    "Leader",
    el(
      "div",
      { class: "leader-line" },
      el("div", {}, el("div", { class: "muted" }, "address"),
        el("div", { id: "leader-address", class: "big mono" }, leader ? leader.address : "none")),
      el("div", {}, el("div", { class: "muted" }, "epoch"),
        el("div", { id: "leader-epoch", class: "big" }, leader ? leader.epoch : "–")),
      el("div", {}, el("div", { class: "muted" }, "leading since"),
        el("div", { id: "leader-since", class: "big" },
          leader ? `${clock(leader.since_ms)} (${duration(leader.term_s)})` : "–")),
      el("div", {}, el("div", { class: "muted" }, "next in line"),
        el("div", { id: "next-in-line", class: "big mono",
          title: "leads next if the leader stops; nimbus handover hands over to it" },
          c.next_in_line || "none")),
    ),
    leader ? null : el("p", { class: "error-text" }, "No replica leads right now."),
  );
}

function replicasSection(c) {
  const rows = c.replicas.map((r) =>
    el("tr", { "data-replica": r.address, "data-leader": r.is_leader ? "true" : "false" },
      el("td", { class: "mono" }, r.address, r.serving_this_page ? el("span", { class: "muted" }, " (this page)") : null),
      el("td", {}, el("span", { class: `badge ${r.is_leader ? "leader" : ""}` }, r.role)),
      el("td", { class: "num" }, r.epoch || "–"),
      el("td", { class: "num" }, duration(r.uptime_s)),
      el("td", { class: "num" }, r.code_sync_lag),
      el("td", {}, el("span", { class: `badge ${r.code_sync_lag ? "syncing" : "ok"}` }, r.health)),
      el("td", { class: "muted" }, r.version),
    ));
  return section("replicas", `Replicas (${c.replicas.length})`, table("replicas-table",
    [["address"], ["role"], ["own term", "num"], ["uptime", "num"], ["code sync lag", "num"], ["health"], ["version"]],
    rows, "No replica is registered."));
}

function timelineSection(c) {
  const terms = c.epochs;
  if (!terms.length) {
    return section("timeline", "Leadership terms", el("p", { class: "muted" }, "No term recorded yet."));
  }
  const holders = [...new Set(terms.map((t) => t.holder))];
  const width = 1000, left = 170, right = 20, laneH = 30, top = 10;
  const height = top + holders.length * laneH + 28;
  const start = Math.min(...terms.map((t) => t.started_ms));
  const end = Math.max(c.now_ms, ...terms.map((t) => t.ended_ms || t.started_ms));
  const span = Math.max(1, end - start);
  const x = (ms) => left + ((ms - start) / span) * (width - left - right);
  const chart = svg("svg", {
    id: "epochs-timeline", class: "timeline", viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-label": `${terms.length} leadership terms`,
  });
  holders.forEach((holder, i) => {
    const y = top + i * laneH;
    chart.append(svg("line", { x1: left, x2: width - right, y1: y + laneH - 4, y2: y + laneH - 4, stroke: "#eceff3" }));
    chart.append(svg("text", { x: left - 8, y: y + laneH / 2 + 2, "text-anchor": "end", class: "lane-label", text: holder }));
  });
  for (const t of terms) {
    const y = top + holders.indexOf(t.holder) * laneH + 3;
    const x0 = x(t.started_ms);
    const x1 = x(t.ended_ms || c.now_ms);
    const w = Math.max(6, x1 - x0);
    const classes = ["term-bar", t.current ? "current" : "", t.ended_ms === null && !t.current ? "open-end" : ""];
    const bar = svg("rect", {
      class: classes.join(" ").trim(), x: x0, y, width: w, height: laneH - 10, rx: 3,
      fill: colorOf(t.holder, holders), "data-epoch": t.epoch, "data-holder": t.holder,
    });
    const ends = t.ended_ms ? `ended ${clock(t.ended_ms)}` : t.current ? "current" : "end unknown";
    bar.append(svg("title", { text: `epoch ${t.epoch}: ${t.holder}, from ${clock(t.started_ms)}, ${duration(t.length_s)}, ${ends}` }));
    const group = svg("g", { class: "term", "data-epoch": t.epoch }, bar);
    if (w > 22) group.append(svg("text", { x: x0 + 4, y: y + laneH / 2 - 1, class: "term-label", text: `#${t.epoch}` }));
    chart.append(group);
  }
  chart.append(svg("text", { x: left, y: height - 6, class: "axis", text: clock(start) }));
  chart.append(svg("text", { x: width - right, y: height - 6, "text-anchor": "end", class: "axis", text: `${clock(end)} (now)` }));
  const rows = [...terms].reverse().map((t) =>
    el("tr", { "data-epoch": t.epoch },
      el("td", { class: "num" }, t.epoch),
      el("td", { class: "mono" }, t.holder),
      el("td", {}, clock(t.started_ms)),
      el("td", { class: "num" }, duration(t.length_s)),
      el("td", {}, t.current ? el("span", { class: "badge leader" }, "current") : t.ended_ms ? "" : el("span", { class: "muted" }, "end unknown"))));
  return section("timeline", `Leadership terms (${terms.length})`, chart,
    el("details", {}, el("summary", { class: "muted" }, "as a table"),
      table("epochs-table", [["epoch", "num"], ["holder"], ["started"], ["length", "num"], [""]], rows, "")));
}

function topologiesSection(c) {
  const rows = c.topologies.map((t) =>
    el("tr", { "data-topology": t.name },
      el("td", {}, el("a", { href: `/topologies/${encodeURIComponent(t.name)}` }, t.name)),
      el("td", { class: "mono muted" }, t.id),
      el("td", {}, el("span", { class: `badge ${t.status}` }, t.status),
        t.failing ? el("span", { class: "badge failing" }, `failing (${t.worker_restarts} restarts)`) : ""),
      el("td", { class: "num" }, `${t.workers}/${t.workers_wanted}`),
      el("td", { class: "num" }, duration(t.uptime_s)),
      el("td", { class: "mono" }, t.code_replicas.join(", ") || el("span", { class: "error-text" }, "none")),
      el("td", {}, t.last_error
        ? el("span", { class: "error-text" }, `${t.last_error.component}: ${t.last_error.message} (${duration(t.last_error.age_s)} ago)`)
        : el("span", { class: "muted" }, "–"))));
  return section("topologies", `Topologies (${c.topologies.length})`, table("topologies-table",
    [["name"], ["id"], ["status"], ["workers", "num"], ["uptime", "num"], ["code held by"], ["last error"]],
    rows, "No topology is running."));
}

function slotBar(used, total) {
  const cell = 12, gap = 2;
  const bar = svg("svg", { class: "slots", width: Math.max(1, total) * (cell + gap), height: cell });
  for (let i = 0; i < total; i++) {
    bar.append(svg("rect", { x: i * (cell + gap), y: 0, width: cell, height: cell, rx: 2, class: i < used ? "used" : "free" }));
  }
  return bar;
}

function supervisorsSection(c) {
  const rows = c.supervisors.map((s) =>
    el("tr", { "data-supervisor": s.id },
      el("td", { class: "mono" }, s.id),
      el("td", { class: "mono" }, s.host),
      el("td", {}, slotBar(s.slots_used, s.slots_total), " ",
        el("span", { class: "slots-text" }, `${s.slots_used} used, ${s.slots_free} free`)),
      el("td", {}, s.workers.length
        ? s.workers.map((w, i) => [i ? ", " : "", el("a", { href: `/topologies/${encodeURIComponent(w.topology)}` }, w.topology), ` (slot ${w.slot})`])
        : el("span", { class: "muted" }, "none")),
      el("td", { class: "num" }, duration(s.heartbeat_age_s)),
      el("td", { class: "num" }, duration(s.uptime_s))));
  return section("supervisors", `Supervisors (${c.supervisors.length})`, table("supervisors-table",
    [["id"], ["host"], ["slots"], ["workers"], ["heartbeat age", "num"], ["uptime", "num"]],
    rows, "No supervisor is registered."));
}

function renderCluster(c) {
  document.title = c.leader ? `Nimbus · leader ${c.leader.address}` : "Nimbus · no leader";
  document.getElementById("main").replaceChildren(
    leaderSection(c), replicasSection(c), timelineSection(c), topologiesSection(c), supervisorsSection(c));
}

// -- topology page ---------------------------------------------------------------------

function layout(components) {
  // Columns by longest path from a spout (the graph is a DAG: cycles are refused at build).
  const byName = new Map(components.map((c) => [c.name, c]));
  const depth = new Map();
  const visit = (name, seen) => {
    if (depth.has(name)) return depth.get(name);
    if (seen.has(name)) return 0;
    seen.add(name);
    const inputs = ((byName.get(name) || {}).inputs || []).filter((i) => byName.has(i.source));
    const d = inputs.length ? 1 + Math.max(...inputs.map((i) => visit(i.source, seen))) : 0;
    depth.set(name, d);
    return d;
  };
  components.forEach((c) => visit(c.name, new Set()));
  const columns = [];
  for (const c of components) (columns[depth.get(c.name)] ||= []).push(c);
  return columns;
}

function groupingLabel(input) {
  return input.fields && input.fields.length ? `${input.grouping} [${input.fields.join(", ")}]` : input.grouping;
}

function graphSvg(components, parallelism) {
  const columns = layout(components);
  const nodeW = 170, nodeH = 58, colGap = 120, rowGap = 36, pad = 20;
  const tallest = Math.max(...columns.map((col) => col.length));
  const width = pad * 2 + columns.length * nodeW + (columns.length - 1) * colGap;
  const height = pad * 2 + tallest * nodeH + (tallest - 1) * rowGap;
  const pos = new Map();
  columns.forEach((col, ci) => {
    const offset = (height - (col.length * nodeH + (col.length - 1) * rowGap)) / 2;
    col.forEach((c, ri) => pos.set(c.name, { x: pad + ci * (nodeW + colGap), y: offset + ri * (nodeH + rowGap) }));
  });
  const chart = svg("svg", { id: "component-graph", class: "graph", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `component graph with ${components.length} components` });
  chart.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#64748b" }))));
  for (const c of components) {
    for (const input of c.inputs || []) {
      const from = pos.get(input.source), to = pos.get(c.name);
      if (!from || !to) continue;
      const x1 = from.x + nodeW, y1 = from.y + nodeH / 2, x2 = to.x, y2 = to.y + nodeH / 2;
      const mid = (x1 + x2) / 2;
      chart.append(svg("g", { class: "edge", "data-source": input.source, "data-target": c.name, "data-grouping": input.grouping },
        svg("path", { d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: mid, y: (y1 + y2) / 2 - 6, "text-anchor": "middle", text: groupingLabel(input) })));
    }
  }
  for (const c of components) {
    const p = pos.get(c.name);
    const tasks = parallelism[c.name] || c.parallelism;
    chart.append(svg("g", { class: `node ${c.kind}`, "data-name": c.name, "data-kind": c.kind, transform: `translate(${p.x},${p.y})` },
      svg("rect", { width: nodeW, height: nodeH, rx: c.kind === "spout" ? 28 : 6 }),
      svg("text", { x: 12, y: 22, class: "name", text: c.name }),
      svg("text", { x: 12, y: 42, class: "meta", text: [c.kind, c.type, `×${tasks}`].filter(Boolean).join(" · ") })));
  }
  return chart;
}

function graphSection(d) {
  const g = d.graph;
  let body;
  if (!g) body = el("p", { class: "muted" }, "No code digest recorded.");
  else if (g.status === "loading") body = el("p", { class: "muted", id: "graph-status" }, "Loading the component graph from the package…");
  else if (g.status !== "ready") body = el("p", { class: "error-text", id: "graph-status" }, `Component graph unavailable: ${g.reason}`);
  else body = graphSvg(g.components, d.component_parallelism || {});
  return section("graph", "Components", body,
    el("p", { class: "muted" }, "Spouts are rounded, bolts square, sinks orange; each arrow names its grouping; ×N is the parallelism."));
}

function renderTopology(name, d) {
  const main = document.getElementById("main");
  if (!d) {
    document.title = `Nimbus · ${name}`;
    main.replaceChildren(el("p", {}, el("a", { href: "/" }, "← cluster")),
      el("h1", {}, name), el("p", { id: "topology-missing", class: "error-text" }, `No live topology named ${name}.`));
    return;
  }
  const t = d.topology;
  document.title = `Nimbus · ${t.name}`;
  const summary = section("summary", "Summary", el("dl", { class: "kv" },
    el("dt", {}, "id"), el("dd", { class: "mono" }, t.id),
    el("dt", {}, "status"), el("dd", {}, el("span", { id: "topology-status", class: `badge ${t.status}` }, t.status),
      t.failing ? el("span", { id: "topology-failing", class: "badge failing" }, `failing (${t.worker_restarts} restarts)`) : ""),
    el("dt", {}, "epoch"), el("dd", {}, t.epoch),
    el("dt", {}, "workers"), el("dd", {}, `${t.workers} of ${t.workers_wanted}`),
    el("dt", {}, "uptime"), el("dd", {}, duration(t.uptime_s)),
    el("dt", {}, "throughput"), el("dd", { id: "throughput" }, `${d.rows_per_s} rows/s`),
    el("dt", {}, "code held by"), el("dd", { class: "mono" }, t.code_replicas.join(", ") || "none"),
    el("dt", {}, "digest"), el("dd", { class: "mono muted" }, t.digest)));
  const workers = d.workers.map((w) =>
    el("tr", { "data-worker": `${w.supervisor_id}/${w.slot}` },
      el("td", { class: "mono" }, w.supervisor_id), el("td", { class: "num" }, w.slot),
      el("td", { class: "mono" }, w.host), el("td", {}, w.state),
      el("td", { class: "num heartbeat-age" }, w.heartbeat_age_s === null ? "never" : duration(w.heartbeat_age_s)),
      el("td", { class: "num" }, w.batches_committed), el("td", { class: "num" }, w.rows_processed),
      el("td", { class: "num" }, w.rows_per_s === null ? "–" : w.rows_per_s)));
  const errors = d.errors.map((e) =>
    el("tr", {}, el("td", {}, clock(e.time_ms)), el("td", { class: "mono" }, e.component),
      el("td", { class: "mono" }, e.host), el("td", { class: "error-text" }, e.message)));
  main.replaceChildren(
    el("p", {}, el("a", { href: "/" }, "← cluster")),
    el("h1", { id: "topology-name" }, t.name),
    summary,
    graphSection(d),
    section("workers", `Workers (${d.workers.length})`, table("workers-table",
      [["supervisor"], ["slot", "num"], ["host"], ["state"], ["heartbeat age", "num"], ["batches", "num"], ["rows", "num"], ["rows/s", "num"]],
      workers, "No worker is assigned.")),
    section("errors", "Recent errors", table("errors-table", [["time"], ["component"], ["host"], ["message"]], errors, "No error reported.")));
}

// -- wiring ------------------------------------------------------------------------------

function start() {
  const match = location.pathname.match(/^\/topologies\/([^/]+)\/?$/);
  const topology = match ? decodeURIComponent(match[1]) : null;
  const url = topology ? `/api/v1/events?topology=${encodeURIComponent(topology)}` : "/api/v1/events";
  const events = new EventSource(url);
  events.onopen = connectionBack;
  events.onerror = connectionLost;
  events.addEventListener("cluster", (e) => {
    const snapshot = JSON.parse(e.data);
    connectionBack();
    showBanners(snapshot);
    renderCluster(snapshot);
  });
  events.addEventListener("topology", (e) => {
    const detail = JSON.parse(e.data);
    connectionBack();
    if (detail) showBanners(detail);
    renderTopology(topology, detail);
  });
}

start();
