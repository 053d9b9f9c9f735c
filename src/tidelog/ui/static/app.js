// tidelog ui: one EventSource; the server polls the brokers and pushes
// "snapshot" (on connect), "state" (nodes and partitions changed) and
// "changes" (new state-change events). Nothing here polls.
"use strict";
// The view's token, when it has one (fault drills on, or a secure cluster): it
// comes in the URL tidelog ui printed (?token=… or #token=…) and goes with the
// event stream (an EventSource cannot send headers) and, as X-Tidelog-Token,
// with every drill.
const token = new URLSearchParams(location.search).get("token")
  || new URLSearchParams(location.hash.slice(1)).get("token") || "";
let view = { nodes: [], partitions: [], events: [], controller_id: null, drills: false, errors: [] };

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const list = (xs) => "[" + (xs || []).join(",") + "]";

function connect() {
  const source = new EventSource(token ? `/events?token=${encodeURIComponent(token)}` : "/events");
  source.addEventListener("open", () => setStatus("live", "live"));
  source.addEventListener("error", () => setStatus("down", "disconnected, retrying…"));
  source.addEventListener("snapshot", (e) => { view = JSON.parse(e.data); render(); });
  source.addEventListener("state", (e) => { Object.assign(view, JSON.parse(e.data)); render(); });
  source.addEventListener("changes", (e) => {
    view.events = view.events.concat(JSON.parse(e.data).events).slice(-500);
    renderTimeline();
  });
}

function setStatus(cls, text) { const s = $("status"); s.className = "status " + cls; s.textContent = text; }

function render() {
  document.body.classList.toggle("nodrills", !view.drills);
  document.body.classList.toggle("noprocess", view.processes_known === false);
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  $("controller").textContent = view.controller_id == null ? "" : `controller: node ${view.controller_id}`;
  $("errors").innerHTML = (view.errors || []).map((e) => `<p class="bad">${esc(e)}</p>`).join("");
  renderBrokers(); renderPartitions(); renderTimeline();
}

function renderBrokers() {
  $("brokers").tBodies[0].innerHTML = view.nodes.map((n) => {
    const registration = n.role !== "broker" ? "" : !n.registered ? '<span class="warn">not registered</span>'
      : n.fenced ? '<span class="bad">FENCED</span>'
      : n.in_controlled_shutdown ? '<span class="warn">controlled shutdown</span>' : '<span class="good">unfenced</span>';
    const drills = ["kill", "pause", "resume", "restart"].map((a) =>
      `<button data-action="${a}" data-node="${n.id}">${a}</button>`).join("");
    return `<tr><td>${n.id} ${n.is_controller ? '<span class="badge controller">controller</span>' : ""}</td>
      <td>${esc(n.role)}</td><td>${esc(n.host)}:${esc(n.port)}</td>
      <td class="process-col ${n.process === "running" ? "good" : n.process ? "bad" : ""}">${esc(n.process ?? "")}</td>
      <td>${esc(n.state ?? "")}</td><td>${registration}</td><td>${esc(n.broker_epoch ?? "")}</td>
      <td>${n.reachable ? '<span class="good">ok</span>' : `<span class="bad" title="${esc(n.error)}">unreachable</span>`}</td>
      <td class="drill-col">${drills}</td></tr>`;
  }).join("");
}

function renderPartitions() {
  $("partitions").innerHTML = view.partitions.map((p) => {
    const offsets = p.replica_offsets || {};
    const replicas = p.replicas || Object.keys(offsets).map(Number);
    const known = Object.values(offsets).filter((o) => o.log_end_offset != null);
    const newest = Math.max(0, ...known.map((o) => o.log_end_offset));   // the furthest replica: lag is behind it
    const max = Math.max(1, newest);                                        // the bars' scale
    const under = (p.isr || []).length < replicas.length;
    const rows = replicas.map((r) => {
      const o = offsets[String(r)];
      const inIsr = (p.isr || []).includes(r);
      const tag = `${r}${r === p.leader ? " leader" : ""}${inIsr ? "" : " (out of ISR)"}`;
      if (!o || o.log_end_offset == null) {
        return `<div class="replica gone"><span class="name">${esc(tag)}</span><div class="bar"></div>
          <span class="numbers">no answer from broker ${r}</span></div>`;
      }
      const pct = (v) => (100 * v / max).toFixed(2) + "%";
      const start = o.log_start_offset, hw = o.high_watermark, leo = o.log_end_offset, lso = o.last_stable_offset;
      return `<div class="replica ${inIsr ? "" : "out"}"><span class="name">${esc(tag)}</span>
        <div class="bar"><div class="seg committed" style="left:${pct(start)};width:${pct(hw - start)}"></div>
          <div class="seg uncommitted" style="left:${pct(hw)};width:${pct(leo - hw)}"></div>
          ${lso < hw ? `<div class="lso" style="left:${pct(lso)}"></div>` : ""}</div>
        <span class="numbers">start ${start} · hw ${hw} · lso ${lso} · leo ${leo}${
          leo < newest ? ` · <span class="warn">lag ${newest - leo}</span>` : ""}</span></div>`;
    }).join("");
    return `<div class="partition ${under ? "under" : ""}"><div class="title">${esc(p.topic)}-${p.partition}
      <span class="meta">leader ${p.leader ?? "?"} · leader epoch ${p.leader_epoch ?? "?"} · ISR ${list(p.isr)}
      · replicas ${list(p.replicas)}</span></div>${rows}</div>`;
  }).join("") || "<p>no partitions yet</p>";
}

function describe(e) {
  const tp = e.topic != null ? `${e.topic}-${e.partition}` : "";
  switch (e.kind) {
    case "leader_election": return `${tp} leader ${e.old_leader} → ${e.new_leader} (epoch ${e.leader_epoch}, ISR ${list(e.isr)})`;
    case "isr_shrink": return `${tp} ISR ${list(e.old_isr)} → ${list(e.new_isr)} (removed ${list(e.removed)})`;
    case "isr_expand": return `${tp} ISR ${list(e.old_isr)} → ${list(e.new_isr)} (added ${list(e.added)})`;
    case "replicas_changed": return `${tp} replicas ${list(e.old_replicas)} → ${list(e.new_replicas)}`;
    case "partition_created": return `${tp} leader ${e.leader}, replicas ${list(e.replicas)}`;
    case "partition_deleted": return tp;
    case "truncation": return `${tp} on broker ${e.broker} truncated to ${e.log_end_offset}`;
    case "broker_state": return `broker ${e.broker}: ${e.old_state} → ${e.new_state} (${e.reason})`;
    case "metadata_loaded": return `broker ${e.broker} loaded metadata at offset ${e.metadata_offset}`;
    default: return `broker ${e.broker_id} (epoch ${e.broker_epoch})`;
  }
}

function renderTimeline() {
  // Newest first; a broker answering a round late may bring older events.
  const events = view.events.slice().sort((a, b) => a.time_ms - b.time_ms);
  $("timeline").innerHTML = events.reverse().map((e) =>
    `<li class="${esc(e.kind)}"><span class="time">${new Date(e.time_ms).toLocaleTimeString()}</span>
      <span class="kind">${esc(e.kind)}</span>${esc(describe(e))}<span class="seen">seen by ${list(e.seen_by)}</span></li>`
  ).join("");
}

document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  b.disabled = true;
  try {
    const r = await fetch(`/api/drill?action=${encodeURIComponent(b.dataset.action)}&node=${encodeURIComponent(b.dataset.node)}`,
      { method: "POST", headers: token ? { "X-Tidelog-Token": token } : {} });
    if (!r.ok) alert((await r.json()).error);
  } finally { b.disabled = false; }
});

connect();
