/*
 * app.js - the fleet dashboard, served by edgemon-aggregator under /ui/.
 *
 * Views chosen by the URL's hash: the fleet table (#/, polled from /api/fleet every 2 s and
 * redrawn without a reload), one device (#/device/<id>: /api/devices/<id>/history drawn with
 * uPlot, the level timeline shaded behind every latency chart, and the device's flight
 * recordings from /api/devices/<id>/flights and stack profiles from /api/devices/<id>/profiles,
 * each linked to its JSON, a profile also to its breach's recording, each opening its own view),
 * the fleet's merged latency (#/latency: /api/latency, polled every 5 s and updated in place), a
 * stack profile's flame graphs (#/device/<id>/profile/<key>: flame.js) and a flight recording's
 * timeline (#/device/<id>/flight/<key>: timeline.js). The module owns the page's DOM under
 * <main id="app">, the routing, the uPlot charts of the current view (destroyed when the view
 * changes), one timer, and the current view's resize and leave hooks (state.onResize,
 * state.onLeave: what flame.js and timeline.js set for their canvases). Errors from the
 * API are shown in the page's error line, never thrown: every request goes through api(), and
 * every asynchronous path ends in a catch that reports to that line. An answer 503 with
 * Retry-After (the API's lane is full, or a query ran past its deadline) is asked again after
 * the seconds it gives, at most API_RETRIES times and API_RETRY_MAX_S apart. The device view
 * explains each escalation by the breach's verdict its state message carried (why the stage
 * got slow: causes with their share of the excess latency and their evidence), the latest one
 * at the top; a change to the level it came from is the level announced at the agent's start.
 */
"use strict";

const LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"];
const RANGES = ["5m", "15m", "1h", "6h", "24h", "7d"];
const FLEET_POLL_MS = 2000;
const LATENCY_POLL_MS = 5000; // The fleet latency view's refresh (a heavier read than the fleet's).
const FLIGHTS_LISTED = 20; // Flight recordings the device view lists, newest first.
const PROFILES_LISTED = 20; // Stack profiles the device view lists, newest first.
const API_RETRIES = 3; // Times a 503 with Retry-After is asked again before it is shown.
const API_RETRY_MAX_S = 10; // The longest wait for one retry, whatever Retry-After says.
const VERDICT_CAUSES = 3; // Causes a verdict shows (the largest shares; those above 0).
const VERDICT_EVIDENCE = 3; // Figures of evidence shown per cause, in the agent's order.
// The device view refreshes less often as its range grows (a 7-day history is a bigger read).
const DEVICE_POLL_MS = {
  "5m": 5000,
  "15m": 5000,
  "1h": 15000,
  "6h": 60000,
  "24h": 60000,
  "7d": 60000,
};
const COLORS = {
  p50: "#2f6fde",
  p99: "#d6336c",
  max: "#7a7a7a",
  budget: "#111111",
  p90: "#8f5bd6",
  mean: "#2f6fde",
  fit: "#e8590c",
};
const BAND = {
  WARN: "rgba(245, 159, 0, 0.16)",
  DEGRADED: "rgba(253, 126, 20, 0.22)",
  CRITICAL: "rgba(224, 49, 49, 0.24)",
};

/* Groups of the device view's metric charts: a metric joins the first group that matches its
 * name. `expect` are the names a device usually sends for that group; each one missing from
 * the answer is listed as absent. */
const METRIC_GROUPS = [
  { title: "Memory", test: /^mem\.|rss|^sys\.mem\./, expect: ["mem.rss"] },
  { title: "Pressure", test: /^psi\./, expect: [] },
  { title: "CPU", test: /cpu/, expect: ["agent.cpu"] },
  { title: "IPC", test: /ipc/, expect: ["pmu.ipc"] },
  { title: "Cache misses", test: /miss/, expect: ["pmu.cache_miss_ratio"] },
  { title: "Temperatures", test: /temp|thermal/, expect: [] },
  { title: "Throttling", test: /thrott|freq/, expect: [] },
  { title: "Spool", test: /^spool\./, expect: [] },
  { title: "Drops", test: /drop|lost|overflow|not_sent/, expect: [] },
  { title: "Other", test: /./, expect: [] },
];

const state = {
  view: null,
  timer: null,
  charts: [],
  seq: 0, // bumped on every view change: answers for an older view are ignored
  range: "1h",
  levels: new Set(LEVELS),
  name: "",
  sort: { key: "id", dir: 1 },
  fleet: null,
  rows: new Map(), // the fleet table's rows by device id: {tr, tds, sigs}
  inflight: false,
  ticket: 0,
  onResize: null, // the current view's redraw on a resize, besides its uPlot charts
  onLeave: null, // what the current view undoes when it goes (window listeners)
};

/* ---- small helpers ------------------------------------------------------------------------ */

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fmtDuration(ns) {
  if (ns === null || ns === undefined || !isFinite(ns)) return "–";
  const a = Math.abs(ns);
  if (a === 0) return "0";
  if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 1 : 2) + " s";
  if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e8 ? 0 : a >= 1e7 ? 1 : 2) + " ms";
  if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e5 ? 0 : 1) + " µs";
  return Math.round(ns) + " ns";
}

function fmtNumber(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + " k";
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v * 10) / 10);
  return v.toPrecision(3);
}

function fmtBytes(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let x = Math.abs(v);
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return (v < 0 ? "-" : "") + x.toFixed(i === 0 && Number.isInteger(x) ? 0 : 1) + " " + units[i];
}

/* "12 s ago" for a time in ns, against the server's now (ns). */
function fmtAgo(ns, nowNs) {
  if (ns === null || ns === undefined) return "never";
  const s = Math.max(0, (nowNs - ns) / 1e9);
  if (s < 1) return "just now";
  if (s < 90) return Math.round(s) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

// One formatter for every time shown: toLocaleString() builds one per call (~0.3 ms each,
// which 1000 fleet rows notice).
const TIME_FORMAT = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  hour12: false,
});

function fmtTime(ns) {
  if (ns === null || ns === undefined) return "–";
  return TIME_FORMAT.format(new Date(ns / 1e6));
}

/* A rule's value or bound: a duration when the change names a stage, else a plain number. */
function fmtRuleValue(v, change) {
  if (v === null || v === undefined) return "–";
  return change.stage ? fmtDuration(v) : fmtNumber(v);
}

function badge(level) {
  const l = level || "UNKNOWN";
  return el("span", { class: "badge badge-" + l, text: l });
}

function muted(text, tag) {
  return el(tag || "span", { class: "muted", text });
}

function headRow(names) {
  return el("thead", {}, el("tr", {}, ...names.map((x) => el("th", { text: x }))));
}

function slopeText(bytesPerS) {
  if (bytesPerS === null || bytesPerS === undefined) return " slope –";
  return " slope " + (bytesPerS >= 0 ? "+" : "") + fmtBytes(bytesPerS) + "/s";
}

function showError(msg) {
  const box = document.getElementById("error");
  if (msg) {
    box.textContent = msg;
    box.hidden = false;
  } else {
    box.textContent = "";
    box.hidden = true;
  }
}

/* GET path, parsed JSON. Rejects with an Error whose message names the path and, for an HTTP
 * error, the API's own {"error": ...} text. */
/* The seconds a 503's Retry-After asks to wait (delta-seconds or an HTTP date), within
 * [0, API_RETRY_MAX_S], or null when the answer carries none. */
function retryAfterS(r) {
  const v = r.headers.get("Retry-After");
  if (v === null || v.trim() === "") return null;
  let s = /^\s*\d+\s*$/.test(v) ? Number(v) : (Date.parse(v) - Date.now()) / 1000;
  if (!isFinite(s)) return null;
  return Math.min(Math.max(s, 0), API_RETRY_MAX_S);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function api(path) {
  let r;
  for (let attempt = 0; ; attempt++) {
    try {
      r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
    } catch (e) {
      throw new Error(`${path}: the aggregator did not answer (${e.message})`);
    }
    const wait = r.status === 503 && attempt < API_RETRIES ? retryAfterS(r) : null;
    if (wait === null) break;
    await sleep(wait * 1000);
  }
  let body = null;
  const text = await r.text();
  try {
    body = JSON.parse(text);
  } catch (e) {
    body = null;
  }
  if (!r.ok) {
    const why = body && body.error ? body.error : text.trim() || r.statusText;
    throw new Error(`${path}: HTTP ${r.status}: ${why}`);
  }
  if (body === null) throw new Error(`${path}: the answer is not JSON`);
  document.getElementById("live").textContent =
    "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
  return body;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

/* The level filter as the API's level parameter: omitted when every level is wanted. */
function levelParam() {
  return state.levels.size === LEVELS.length ? null : [...state.levels].join(",");
}

/* ---- charts ------------------------------------------------------------------------------- */

/* A uPlot plugin that shades the level bands ([{from, to, level}], seconds) behind the series. */
function bandsPlugin(bands) {
  return {
    hooks: {
      drawClear: (u) => {
        const ctx = u.ctx;
        const { top, height } = u.bbox;
        ctx.save();
        for (const b of bands) {
          const fill = BAND[b.level];
          if (!fill) continue;
          const x0 = Math.max(u.bbox.left, u.valToPos(b.from, "x", true));
          const x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(b.to, "x", true));
          if (x1 <= x0) continue;
          ctx.fillStyle = fill;
          ctx.fillRect(x0, top, x1 - x0, height);
        }
        ctx.restore();
      },
    },
  };
}

function chartWidth(container) {
  return Math.max(280, Math.floor(container.getBoundingClientRect().width) - 4);
}

/* Makes a uPlot chart in container. series: [{label, color, fmt, dash}]; data: [xs, ...ys] with
 * xs in seconds (line: a reference line, no point markers); xRange: [from_s, to_s]. */
function makeChart(container, { series, data, xRange, yFmt, bands, height, name }) {
  container.dataset.chart = name;
  const opts = {
    width: chartWidth(container),
    height: height || 220,
    plugins: bands ? [bandsPlugin(bands)] : [],
    scales: {
      x: { time: true, range: () => xRange },
      y: {
        range: (u, min, max) => {
          if (min === null || max === null) return [0, 1];
          const lo = Math.min(0, min);
          return [lo, max > lo ? max * 1.08 : lo + 1];
        },
      },
    },
    series: [
      {},
      ...series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: s.width || 1.5,
        dash: s.dash,
        spanGaps: false,
        // Shown by uPlot only where points are sparse; never on a reference line.
        points: s.line ? { show: false } : { size: 6 },
        value: (u, v) => (v === null || v === undefined ? "–" : yFmt(v)),
      })),
    ],
    axes: [
      { stroke: "#555", grid: { stroke: "#eee" } },
      {
        stroke: "#555",
        grid: { stroke: "#eee" },
        size: 82,
        values: (u, splits) => splits.map((v) => yFmt(v)),
      },
    ],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
  const chart = new uPlot(opts, data, container);
  state.charts.push(chart);
  return chart;
}

/* canvas sized to width x height CSS px at the screen's pixel ratio, cleared; returns its 2D
 * context scaled to CSS px, with the labels' font (flame.js and timeline.js draw through it). */
function canvasContext(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  return ctx;
}

function destroyCharts() {
  for (const c of state.charts) c.destroy();
  state.charts = [];
}

function resizeCharts() {
  for (const c of state.charts) {
    const box = c.root.parentElement;
    if (box) c.setSize({ width: chartWidth(box), height: c.height });
  }
}

const nsToS = (t) => t.map((x) => x / 1e9);

/* Level bands (seconds) from the level at `from` and the changes within [from, to]. */
function levelBands(fromNs, toNs, levelAtFrom, changes) {
  const bands = [];
  let level = levelAtFrom;
  let start = fromNs;
  for (const c of changes) {
    if (c.time_ns > start) bands.push({ from: start / 1e9, to: c.time_ns / 1e9, level });
    level = c.level;
    start = Math.max(start, c.time_ns);
  }
  if (toNs > start) bands.push({ from: start / 1e9, to: toNs / 1e9, level });
  return bands;
}

/* ---- views -------------------------------------------------------------------------------- */

function setView(name, render) {
  if (state.onLeave) state.onLeave();
  state.onLeave = null;
  state.onResize = null;
  state.seq++;
  state.view = name;
  clearTimeout(state.timer);
  state.timer = null;
  state.fleet = null;
  destroyCharts();
  showError(null);
  document.querySelectorAll("[data-nav]").forEach((a) => {
    a.classList.toggle("active", a.dataset.nav === name);
  });
  const app = document.getElementById("app");
  app.replaceChildren();
  app.dataset.view = name;
  render(app, state.seq);
}

/* Runs fn now, then again every() ms after each run ends, while the view that asked is
 * current; a hidden tab skips its turns. */
function poll(seq, every, fn) {
  const tick = async () => {
    if (seq !== state.seq) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (e) {
        if (seq === state.seq) showError(e.message);
      }
    }
    if (seq === state.seq) state.timer = setTimeout(tick, every());
  };
  tick();
}

function levelFilters(onChange) {
  const box = el("div", { class: "filters" });
  box.append(el("span", { class: "filter-label", text: "Level" }));
  for (const l of LEVELS) {
    const cb = el("input", {
      type: "checkbox",
      name: "level",
      value: l,
      checked: state.levels.has(l),
      onchange: (ev) => {
        if (ev.target.checked) state.levels.add(l);
        else state.levels.delete(l);
        onChange();
      },
    });
    box.append(el("label", { class: "check" }, cb, badge(l)));
  }
  let debounce = null;
  const input = el("input", {
    type: "search",
    name: "name",
    placeholder: "name glob, e.g. sim-00*",
    value: state.name,
    oninput: (ev) => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        state.name = ev.target.value.trim();
        onChange();
      }, 250);
    },
  });
  box.append(el("label", { class: "glob" }, "Name ", input));
  return box;
}

function rangeButtons(onChange) {
  const box = el("div", { class: "ranges", role: "group", "aria-label": "time range" });
  for (const r of RANGES) {
    box.append(
      el("button", {
        type: "button",
        class: r === state.range ? "active" : null,
        "data-range": r,
        text: r,
        onclick: () => {
          state.range = r;
          box.querySelectorAll("button").forEach((b) => {
            b.classList.toggle("active", b.dataset.range === r);
          });
          onChange();
        },
      })
    );
  }
  return box;
}

/* ---- fleet view --------------------------------------------------------------------------- */

const FLEET_COLUMNS = [
  { key: "id", title: "Device", value: (d) => d.id },
  { key: "level", title: "Level", value: (d) => (d.level ? LEVELS.indexOf(d.level) : -1) },
  { key: "online", title: "Online", value: (d) => (d.online === null ? -1 : d.online ? 1 : 0) },
  { key: "last_seen", title: "Last seen", value: (d) => d.last_seen_ns || 0 },
  {
    key: "worst",
    title: "Worst stage vs budget",
    value: (d) =>
      d.worst_stage ? (d.worst_stage.ratio !== null ? d.worst_stage.ratio : d.worst_stage.p99_ns / 1e12) : -1,
  },
  { key: "change", title: "Last level change", value: (d) => (d.last_change ? d.last_change.time_ns : 0) },
];

function renderFleet(app, seq) {
  const summary = el("div", { class: "summary", id: "summary" }, "Loading...");
  const head = el("tr");
  const open = (ev) => {
    const tr = ev.target.closest("tr[data-id]");
    if (tr && !ev.target.closest("a")) location.hash = deviceHref(tr.dataset.id);
  };
  const tbody = el("tbody", {
    onclick: open,
    onkeydown: (ev) => {
      if (ev.key === "Enter") open(ev);
    },
  });
  const table = el("table", { class: "fleet", id: "fleet-table" }, el("thead", {}, head), tbody);
  state.rows = new Map();
  for (const c of FLEET_COLUMNS) {
    head.append(
      el("th", {
        "data-sort": c.key,
        text: c.title,
        onclick: () => {
          // A new column sorts names A-Z and figures highest first; the same column flips.
          const dir = state.sort.key === c.key ? -state.sort.dir : c.key === "id" ? 1 : -1;
          state.sort = { key: c.key, dir };
          drawFleet();
        },
      })
    );
  }
  const refresh = () => loadFleet(seq).catch((e) => showError(e.message));
  app.append(
    el("section", { class: "toolbar" }, levelFilters(refresh)),
    summary,
    el("div", { class: "table-wrap" }, table)
  );
  poll(seq, () => FLEET_POLL_MS, () => loadFleet(seq));
}

async function loadFleet(seq) {
  if (!state.levels.size) {
    state.fleet = { now_ns: Date.now() * 1e6, total: 0, truncated: false, devices: [] };
    drawFleet();
    return;
  }
  if (state.inflight) return;
  state.inflight = true;
  try {
    const body = await api("/api/fleet" + query({ name: state.name, level: levelParam(), limit: 5000 }));
    if (seq !== state.seq) return;
    state.fleet = body;
    showError(null);
    drawFleet();
  } finally {
    state.inflight = false;
  }
}

function worstCell(w) {
  if (!w) return el("td", { class: "muted", text: "–" });
  const ratio = w.ratio !== null && w.ratio !== undefined ? w.ratio : null;
  const cls = ratio === null ? "" : ratio > 1 ? "over" : ratio > 0.8 ? "near" : "";
  return el(
    "td",
    { class: "worst " + cls, title: w.rule ? "rule " + w.rule : null },
    el("b", { text: w.stage }),
    " " + fmtDuration(w.p99_ns) + (w.budget_ns ? " / " + fmtDuration(w.budget_ns) : ""),
    ratio !== null ? el("span", { class: "ratio", text: " (" + ratio.toFixed(2) + "×)" }) : null
  );
}

function changeCell(c, nowNs) {
  if (!c) return el("td", { class: "muted", text: "–" });
  return el(
    "td",
    { class: "change", title: fmtTime(c.time_ns) },
    el("span", { class: "muted", text: fmtAgo(c.time_ns, nowNs) + ": " }),
    isStart(c) ? `agent started (${c.level})` : (c.prev_level || "?") + " → " + c.level,
    c.reason ? el("div", { class: "reason", text: c.reason }) : null,
    topCause(c.top_cause)
  );
}

/* A state whose level is the one before it (and no change of model: those are not stored) is
 * the level its agent announced at start, not a change. */
const isStart = (c) => c.prev_level !== null && c.level === c.prev_level;

const fmtShare = (share) => (share === null || share === undefined ? "–" : Math.round(share * 100) + "%");

/* A verdict's first cause ({cause, share}: /api/fleet's top_cause) in a line
 * ("cause: cpu_contention 81%"), or null without one. */
function topCause(c) {
  if (!c || !c.cause) return null;
  return el("div", { class: "top-cause", "data-cause": c.cause },
    muted("cause: "), el("b", { text: c.cause }), " " + fmtShare(c.share));
}

/* One cause of a verdict: its name and share, its first figures of evidence, and the processes
 * or functions it names. */
function causeLine(c) {
  const parts = Object.entries(c.evidence || {}).slice(0, VERDICT_EVIDENCE)
    .map(([k, v]) => `${k} ${fmtNumber(v)}`);
  for (const p of (c.processes || []).slice(0, 2)) parts.push(`${p.comm} (pid ${p.pid}) ${fmtShare(p.share)}`);
  for (const f of (c.functions || []).slice(0, 2)) parts.push(`${f.name} +${fmtNumber(f.growth)} pts`);
  return el("li", { class: "cause", "data-cause": c.cause },
    el("b", { text: c.cause }), " ", el("span", { class: "share", text: fmtShare(c.share) }),
    parts.length ? el("span", { class: "evidence", text: " · " + parts.join(", ") }) : null);
}

/* Why the stage got slow (a level change's verdict): the statistic against its NOMINAL baseline,
 * then the causes with the largest shares. */
function verdictBlock(v) {
  const causes = (v.causes || []).filter((c) => c.share > 0).slice(0, VERDICT_CAUSES);
  const head = `${v.stage} ${v.statistic} ${fmtDuration(v.baseline_ns)} → ${fmtDuration(v.breach_ns)}` +
    (v.nominal_windows ? ` against ${v.nominal_windows} NOMINAL windows` : " (no NOMINAL baseline)");
  return el("div", { class: "verdict" }, el("div", { class: "verdict-head", text: head }),
    causes.length ? el("ul", { class: "causes" }, ...causes.map(causeLine))
      : muted("No cause measured.", "p"));
}

/* The device's latest breach explained, above its charts (/api/devices/<id>/history's
 * latest_verdict), or a line saying none was. */
function latestVerdict(h) {
  const c = h.latest_verdict;
  const box = el("section", { class: "latest-verdict", id: "latest-verdict" });
  if (!c || !c.verdict) {
    box.append(muted("No breach of this device was explained by a verdict yet.", "p"));
    return box;
  }
  box.append(el("h2", {}, "Latest breach ", badge(c.level), muted(" " + fmtTime(c.time_ns))),
    verdictBlock(c.verdict));
  return box;
}

const deviceHref = (id) => "#/device/" + encodeURIComponent(id);

/* One device's fleet row: per column a signature of what it shows and the builder of its
 * cell, so that a poll rebuilds only the cells whose signature changed. */
function fleetCells(d, nowNs) {
  const seenText = fmtAgo(d.last_seen_ns, nowNs);
  const c = d.last_change;
  const online = d.online === null ? "–" : d.online ? "online" : "offline";
  return [
    [d.id, () => el("td", { class: "id" }, el("a", { href: deviceHref(d.id), text: d.id }))],
    [String(d.level), () => el("td", {}, badge(d.level))],
    [online, () => el("td", { class: d.online === null ? "muted" : online, text: online })],
    [seenText, () => el("td", { title: fmtTime(d.last_seen_ns), text: seenText })],
    [JSON.stringify(d.worst_stage), () => worstCell(d.worst_stage)],
    [c ? JSON.stringify(c) + fmtAgo(c.time_ns, nowNs) : "", () => changeCell(c, nowNs)],
  ];
}

function drawFleet() {
  const f = state.fleet;
  const table = document.getElementById("fleet-table");
  if (!f || !table) return;
  const col = FLEET_COLUMNS.find((c) => c.key === state.sort.key) || FLEET_COLUMNS[0];
  const dir = state.sort.dir;
  const devices = [...f.devices].sort((a, b) => {
    const va = col.value(a);
    const vb = col.value(b);
    if (va < vb) return -dir;
    if (va > vb) return dir;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
  table.querySelectorAll("th").forEach((th) => {
    th.classList.toggle("sorted", th.dataset.sort === col.key);
    th.dataset.dir = th.dataset.sort === col.key ? (dir > 0 ? "asc" : "desc") : "";
  });
  // Rows are kept between polls: only the cells whose content changed are rebuilt, and the
  // rows are re-inserted only when their order changed (1000 rows rebuilt every 2 s cost
  // more than the poll itself).
  const tbody = table.tBodies[0];
  const seen = new Set();
  const trs = devices.map((d) => {
    seen.add(d.id);
    const cells = fleetCells(d, f.now_ns);
    let row = state.rows.get(d.id);
    if (!row) {
      const tds = cells.map(([, make]) => make());
      const tr = el("tr", { "data-id": d.id, tabindex: 0 }, ...tds);
      row = { tr, tds, sigs: cells.map(([sig]) => sig) };
      state.rows.set(d.id, row);
    }
    cells.forEach(([sig, make], i) => {
      if (row.sigs[i] === sig) return;
      const td = make();
      row.tds[i].replaceWith(td);
      row.tds[i] = td;
      row.sigs[i] = sig;
    });
    const level = d.level || "UNKNOWN";
    if (row.tr.dataset.level !== level) {
      row.tr.className = "device level-" + level;
      row.tr.dataset.level = level;
    }
    return row.tr;
  });
  for (const id of [...state.rows.keys()]) {
    if (!seen.has(id)) state.rows.delete(id);
  }
  const now = tbody.children;
  if (!trs.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: 6 }, muted("No device matches."))));
  } else if (now.length !== trs.length || trs.some((tr, i) => now[i] !== tr)) {
    tbody.replaceChildren(...trs);
  }

  const counts = Object.fromEntries(LEVELS.map((l) => [l, 0]));
  let offline = 0;
  for (const d of f.devices) {
    if (d.level in counts) counts[d.level]++;
    if (d.online === false) offline++;
  }
  const summary = document.getElementById("summary");
  summary.replaceChildren(
    el("b", { text: f.total + (f.total === 1 ? " device" : " devices") }),
    f.truncated ? ` (showing ${f.devices.length})` : "",
    ...LEVELS.map((l) => el("span", { class: "count", "data-count": l }, badge(l), " " + counts[l])),
    el("span", { class: "count" }, offline + " offline")
  );
}

/* ---- device view -------------------------------------------------------------------------- */

function renderDevice(app, seq, id) {
  const header = el("div", { class: "device-head" }, el("h1", { text: id }));
  const body = el("div", { class: "device-body" }, "Loading...");
  const load = () => loadDevice(seq, id, header, body);
  app.append(
    el("a", { href: "#/", class: "back", text: "← fleet" }),
    header,
    el("section", { class: "toolbar" }, rangeButtons(() => load().catch((e) => showError(e.message)))),
    body
  );
  poll(seq, () => DEVICE_POLL_MS[state.range] || 60000, load);
}

async function loadDevice(seq, id, header, body) {
  const enc = encodeURIComponent(id);
  const ticket = ++state.ticket; // a range change and a poll may cross: the last asked wins
  const [info, hist, flights, profiles] = await Promise.all([
    api("/api/devices/" + enc),
    api("/api/devices/" + enc + "/history" + query({ range: state.range, points: 600 })),
    api("/api/devices/" + enc + "/flights" + query({ limit: FLIGHTS_LISTED })),
    api("/api/devices/" + enc + "/profiles" + query({ limit: PROFILES_LISTED })),
  ]);
  if (seq !== state.seq || ticket !== state.ticket) return;
  showError(null);
  header.replaceChildren(
    el("h1", { text: id }),
    badge(info.level),
    el("span", {
      class: info.online === false ? "offline" : "online",
      text: info.online === null ? "status unknown" : info.online ? "online" : "offline",
    }),
    muted([info.board, info.agent_version && "agent " + info.agent_version].filter(Boolean).join(" · "))
  );
  drawDevice(body, hist, flights.flights, profiles);
}

function drawDevice(body, h, flights, profiles) {
  const key = [h.device, state.range, h.step_ns, h.source, h.stages.map((s) => s.stage).join(","),
    h.metrics.map((m) => m.name).join(",")].join("|");
  const bands = levelBands(h.from_ns, h.to_ns, h.level_at_from, h.levels);
  const xRange = [dataStart(h) / 1e9, h.to_ns / 1e9];
  // Same layout as the last draw: new data into the same charts, no flicker.
  if (body.dataset.key === key && state.charts.length) {
    updateDevice(h, bands, xRange);
    document.getElementById("latest-verdict").replaceWith(latestVerdict(h));
    document.getElementById("flights").closest(".table-wrap").replaceWith(flightTable(h.device, flights));
    document.getElementById("profiles").closest(".table-wrap").replaceWith(profileTable(profiles));
    return;
  }
  destroyCharts();
  body.dataset.key = key;
  body.replaceChildren(latestVerdict(h));
  state.device = { bands, xRange };

  const legend = el("div", { class: "band-legend" }, "Shading: ",
    ...["WARN", "DEGRADED", "CRITICAL"].map((l) => el("span", { class: "swatch swatch-" + l, text: l })),
    el("span", { class: "muted", text: ` · resolution ${h.source}, step ${fmtDuration(h.step_ns)}` +
      (dataStart(h) > h.from_ns ? ` · data since ${fmtTime(dataStart(h))}` : "") }));
  body.append(el("h2", { text: "Latency per stage" }), legend);
  const grid = el("div", { class: "grid" });
  body.append(grid);
  if (!h.stages.length) grid.append(muted("No stage reported spans in this range.", "p"));
  for (const s of h.stages) {
    const box = el("div", { class: "chart" });
    const budget = s.budget_ns ? muted(" budget " + fmtDuration(s.budget_ns)) : null;
    const card = el("div", { class: "card" }, el("h3", {}, s.stage, budget), box);
    grid.append(card);
    // Drawn in this order: max under p99 under p50 (raw windows often have max == p99).
    const series = [
      { label: "max", color: COLORS.max, width: 1 },
      { label: "p99", color: COLORS.p99, width: 2 },
      { label: "p50", color: COLORS.p50 },
    ];
    if (s.budget_ns) series.push({ label: "budget", color: COLORS.budget, dash: [6, 4], width: 1.5, line: true });
    const data = stageData(s);
    makeChart(box, { name: "stage:" + s.stage, series, data, xRange, yFmt: fmtDuration, bands });
  }

  body.append(el("h2", { text: "Level timeline" }), levelTable(h));
  body.append(el("h2", { text: "Flight recordings" }), flightTable(h.device, flights));
  body.append(el("h2", { text: "Stack profiles" }), profileTable(profiles));
  body.append(el("h2", { text: "Resources" }));
  drawMetrics(body, h, bands, xRange);
}

/* The time of the first point that has a value (Infinity when none has). */
function firstPoint(t, values) {
  const i = values.findIndex((v) => v !== null && v !== undefined);
  return i < 0 ? Infinity : t[i];
}

/* Where the charts start: the range's start, or a step before the device's first point when
 * it began reporting later (a new device's minute is not squeezed into a day's axis). */
function dataStart(h) {
  let first = Infinity;
  for (const s of h.stages) first = Math.min(first, firstPoint(s.t, s.p50_ns));
  for (const m of h.metrics) first = Math.min(first, firstPoint(m.t, m.mean));
  if (!isFinite(first) || first <= h.from_ns) return h.from_ns;
  return Math.max(h.from_ns, first - h.step_ns);
}

function stageData(s) {
  const data = [nsToS(s.t), s.max_ns, s.p99_ns, s.p50_ns];
  if (s.budget_ns) data.push(s.t.map(() => s.budget_ns));
  return data;
}

function levelTable(h) {
  const rows = [
    el("tr", { class: "at-from" },
      el("td", { text: fmtTime(h.from_ns) }),
      el("td", {}, h.level_at_from ? badge(h.level_at_from) : muted("none")),
      el("td", { colspan: 5 }, muted(h.level_at_from ? "level at the start of the range"
        : "no level known at the start of the range"))),
  ];
  for (const c of h.levels) {
    const start = isStart(c);
    rows.push(el("tr", { class: "level-" + c.level + (start ? " start" : ""), "data-level": c.level },
      el("td", { text: fmtTime(c.time_ns) }),
      start ? el("td", {}, "agent started (", badge(c.level), ")")
        : el("td", {}, badge(c.prev_level), " → ", badge(c.level)),
      el("td", { text: c.rule || "–" }),
      el("td", { text: c.stage || "–" }),
      el("td", { text: fmtRuleValue(c.value, c) }),
      el("td", { text: fmtRuleValue(c.bound, c) }),
      el("td", { class: "reason", text: c.reason || (start ? "" : "–") })));
    if (c.verdict) {
      rows.push(el("tr", { class: "verdict-row", "data-time": c.time_ns },
        el("td", {}), el("td", { colspan: 6 }, verdictBlock(c.verdict))));
    }
  }
  const t = el("table", { class: "timeline", id: "timeline" },
    headRow(["Time", "Change", "Rule", "Stage", "Value", "Bound", "Reason"]),
    el("tbody", {}, ...rows));
  const wrap = el("div", { class: "table-wrap" }, t);
  if (h.levels_truncated) wrap.append(muted("Only the first 1000 changes of the range are listed.", "p"));
  if (!h.levels.length) wrap.append(muted("No level change in this range.", "p"));
  return wrap;
}

/* A button that opens the view of one of device's documents (kind "profile" or "flight"). */
function openButton(cls, text, device, kind, key) {
  const href = deviceHref(device) + "/" + kind + "/" + encodeURIComponent(key);
  return el("button", { type: "button", class: "open " + cls, "data-open": href, text,
    onclick: () => {
      location.hash = href;
    } });
}

/* The device's newest flight recordings (/api/devices/<id>/flights), each with links to its
 * JSON and its CBOR as published, and a button opening its timeline (timeline.js). */

function flightTable(device, flights) {
  const rows = flights.map((f) =>
    el("tr", { class: "flight", "data-key": f.key },
      el("td", { text: fmtTime(f.time_ns) }),
      el("td", { text: f.cause }),
      el("td", { class: "top-cause", "data-cause": f.top_cause || "" },
        f.top_cause ? `${f.top_cause} ${fmtShare(f.top_share)}` : "–"),
      el("td", {}, badge(f.level)),
      el("td", { text: f.rule || "–" }),
      el("td", { text: f.stage || "–" }),
      el("td", { text: `${f.spans} spans, ${f.ticks} ticks` + (f.historical ? " (replayed)" : "") }),
      el("td", { text: fmtBytes(f.bytes) }),
      el("td", {}, el("a", { href: f.url, text: "JSON" }), " ",
        el("a", { href: f.url + "?format=cbor", text: "CBOR" })),
      el("td", {}, openButton("open-timeline", "Timeline", device, "flight", f.key))));
  const t = el("table", { class: "timeline", id: "flights" },
    headRow(["Time", "Trigger", "Cause", "Level", "Rule", "Stage", "Holds", "Size", "Recording",
      "Timeline"]),
    el("tbody", {}, ...rows));
  const wrap = el("div", { class: "table-wrap" }, t);
  if (!flights.length) wrap.append(muted("No flight recording of this device is stored.", "p"));
  else wrap.append(muted("edgemon-cli flight --device ID shows the slowest frames; --svg draws them.", "p"));
  return wrap;
}

/* The device's newest stack profiles (/api/devices/<id>/profiles: `list` is its answer), each
 * with links to its JSON and its CBOR as published, to the flight recording of the same breach,
 * the edgemon-cli command that draws its flame graph (--at the profile's time to the
 * millisecond picks it: the CLI takes the profile nearest that time) and a button opening its
 * flame graphs in the page (flame.js). */
function profileTable(list) {
  const enc = encodeURIComponent(list.device);
  const rows = list.profiles.map((p) => {
    const cut = p.truncated;
    const draw = `edgemon-cli profile --device ${list.device} ` +
      `--at ${new Date(p.time_ns / 1e6).toISOString()} --svg profile-${p.key}.svg`;
    return el("tr", { class: "profile", "data-key": p.key, "data-flight": p.flight },
      el("td", { text: fmtTime(p.time_ns) }),
      el("td", { text: p.cause }),
      el("td", {}, badge(p.level)),
      el("td", { text: p.rule || "–" }),
      el("td", { text: String(p.samples) + (p.lost ? `, ${p.lost} lost` : "") +
        (cut.samples_cut ? `, ${cut.samples_cut} cut` : "") }),
      el("td", { text: String(p.stacks) + (cut.stacks_cut ? `, ${cut.stacks_cut} cut` : "") +
        (p.historical ? " (replayed)" : "") }),
      el("td", { text: `${fmtDuration(p.duration_ns)} at ${p.hz} Hz` }),
      el("td", {}, el("a", { href: p.url, text: "JSON" }), " ",
        el("a", { href: p.url + "?format=cbor", text: "CBOR" })),
      el("td", {}, p.flight
        ? el("a", { href: "/api/devices/" + enc + "/flights/" + p.flight, text: p.flight })
        : muted("none")),
      el("td", {}, el("code", { text: draw })),
      el("td", {}, openButton("open-flame", "Flame graph", list.device, "profile", p.key)));
  });
  const t = el("table", { class: "timeline", id: "profiles" },
    headRow(["Time", "Cause", "Level", "Rule", "Samples", "Stacks", "Window", "Profile",
      "Flight recording", "Drawn by the CLI", "In the page"]),
    el("tbody", {}, ...rows));
  const wrap = el("div", { class: "table-wrap" }, t);
  if (!list.profiles.length) wrap.append(muted("No stack profile of this device is stored.", "p"));
  else wrap.append(muted("edgemon-cli profile --device ID --at TIME shows the hottest stacks and " +
    "functions; --svg draws the flame graph.", "p"));
  return wrap;
}

function metricFmt(name) {
  if (/^mem\.|^sys\.mem\.|rss$|bytes/.test(name)) return fmtBytes;
  if (/cpu$/.test(name) && !/psi/.test(name)) return fmtDuration;
  return fmtNumber;
}

/* Least-squares line through the metric's means with the API's slope (bytes/s), as a series. */
function fitLine(ts, ys, slope) {
  let n = 0;
  let st = 0;
  let sy = 0;
  for (let i = 0; i < ts.length; i++) {
    if (ys[i] === null || ys[i] === undefined) continue;
    n++;
    st += ts[i];
    sy += ys[i];
  }
  if (!n || slope === null || slope === undefined) return ts.map(() => null);
  const t0 = st / n;
  const y0 = sy / n;
  return ts.map((t) => y0 + slope * (t - t0));
}

function drawMetrics(body, h, bands, xRange) {
  const byGroup = METRIC_GROUPS.map(() => []);
  for (const m of h.metrics) {
    const i = METRIC_GROUPS.findIndex((g) => g.test.test(m.name));
    byGroup[i].push(m);
  }
  const rss = h.metrics.find((m) => m.name === "mem.rss") || h.metrics.find((m) => /rss/.test(m.name));
  const grid = el("div", { class: "grid metrics" });
  body.append(grid);
  METRIC_GROUPS.forEach((g, gi) => {
    const present = byGroup[gi];
    const absent = g.expect.filter((n) => !present.some((m) => m.name === n));
    if (!present.length && g.title === "Other") return;
    if (!present.length && !absent.length) {
      grid.append(el("div", { class: "card absent", "data-group": g.title },
        el("h3", { text: g.title }),
        el("p", { class: "absent-note", text: "absent: the device sent none in this range" })));
      return;
    }
    for (const m of present) {
      const fmt = metricFmt(m.name);
      const box = el("div", { class: "chart" });
      const isRss = m === rss;
      const title = el("h3", {}, g.title + " · ", el("code", { text: m.name }));
      if (isRss) {
        const slope = h.rss_slope_bytes_per_s;
        title.append(el("span", { class: "slope", id: "rss-slope", text: slopeText(slope) }));
      }
      grid.append(el("div", { class: "card", "data-metric": m.name }, title, box));
      // max under mean: a raw point's max is its mean.
      const series = [
        { label: "max", color: COLORS.max, width: 1 },
        { label: "mean", color: COLORS.mean },
      ];
      const data = [nsToS(m.t), m.max, m.mean];
      if (isRss) {
        series.push({ label: "fit", color: COLORS.fit, dash: [5, 4], line: true });
        data.push(fitLine(data[0], m.mean, h.rss_slope_bytes_per_s));
      }
      makeChart(box, { name: "metric:" + m.name, series, data, xRange, yFmt: fmt, bands, height: 160 });
    }
    for (const n of absent) {
      grid.append(el("div", { class: "card absent", "data-metric": n },
        el("h3", {}, g.title + " · ", el("code", { text: n })),
        el("p", { class: "absent-note", text: "absent: not sent by the device" })));
    }
  });
}

function updateDevice(h, bands, xRange) {
  state.device.bands.splice(0, state.device.bands.length, ...bands);
  state.device.xRange.splice(0, 2, ...xRange);
  const byName = new Map(state.charts.map((c) => [c.root.parentElement.dataset.chart, c]));
  for (const s of h.stages) {
    const c = byName.get("stage:" + s.stage);
    if (c) c.setData(stageData(s));
  }
  for (const m of h.metrics) {
    const c = byName.get("metric:" + m.name);
    if (!c) continue;
    const data = [nsToS(m.t), m.max, m.mean];
    if (c.series.length > 3) data.push(fitLine(data[0], m.mean, h.rss_slope_bytes_per_s));
    c.setData(data);
  }
  const slope = document.getElementById("rss-slope");
  if (slope) {
    const v = h.rss_slope_bytes_per_s;
    slope.textContent = slopeText(v);
  }
  const old = document.getElementById("timeline");
  if (old) old.closest(".table-wrap").replaceWith(levelTable(h));
}

/* ---- fleet latency view ------------------------------------------------------------------- */

function renderLatency(app, seq) {
  const body = el("div", { class: "latency-body" }, "Loading...");
  const load = () => loadLatency(seq, body).catch((e) => showError(e.message));
  app.append(
    el("h1", { text: "Fleet latency" }),
    el("section", { class: "toolbar" }, rangeButtons(load), levelFilters(load)),
    body
  );
  state.latency = { xRange: [0, 1] };
  poll(seq, () => LATENCY_POLL_MS, () => loadLatency(seq, body));
}

/* Where the fleet charts start: the range's start, or a point's width before the first point
 * when the fleet began reporting later. */
function seriesStart(r) {
  let first = Infinity;
  let step = 0;
  for (const s of r.stages) {
    const t = s.series.t;
    first = Math.min(first, firstPoint(t, s.series.p50_ns));
    if (t.length > 1) step = Math.max(step, t[1] - t[0]);
  }
  if (!isFinite(first) || first <= r.from_ns) return r.from_ns;
  return Math.max(r.from_ns, first - step);
}

function latencySummary(r) {
  return el("p", { class: "summary", id: "latency-summary" },
    el("b", { text: r.devices_matched + (r.devices_matched === 1 ? " device" : " devices") }),
    r.truncated ? " (the table lists the first 1000)" : "",
    muted(` · ${fmtTime(r.from_ns)} – ${fmtTime(r.to_ns)} · resolution ${r.source}`));
}

/* A stage's fleet figures (spans and percentiles), and its devices' table, worst p99 first. */
function latencyStats(f) {
  return el("table", { class: "stats" },
    el("tr", {}, ...["spans", "p50", "p90", "p99", "p99.9", "max"].map((x) => el("th", { text: x }))),
    el("tr", {}, el("td", { text: fmtNumber(f.count) }),
      ...[f.p50_ns, f.p90_ns, f.p99_ns, f.p999_ns, f.max_ns].map((v) =>
        el("td", { text: fmtDuration(v) }))));
}

function latencyDevices(s) {
  const devs = [...s.devices].sort((a, b) => b.p99_ns - a.p99_ns);
  return el("table", { class: "devices" },
    headRow(["Device", "spans", "p50", "p99", "max"]),
    el("tbody", {}, ...devs.map((d) => el("tr", { "data-id": d.id },
      el("td", {}, el("a", { href: deviceHref(d.id), text: d.id })),
      el("td", { text: fmtNumber(d.count) }), el("td", { text: fmtDuration(d.p50_ns) }),
      el("td", { text: fmtDuration(d.p99_ns) }), el("td", { text: fmtDuration(d.max_ns) })))));
}

const latencyData = (s) => [nsToS(s.series.t), s.series.p50_ns, s.series.p99_ns];

/* Asks /api/latency for the toolbar's range and filters and draws it: into the same charts and
 * sections when the stages are those of the last draw (a poll: no flicker, no lost hover), else
 * from scratch. */
async function loadLatency(seq, body) {
  if (!state.levels.size) {
    destroyCharts();
    body.dataset.key = "";
    body.replaceChildren(muted("No level selected.", "p"));
    return;
  }
  const params = { range: state.range, name: state.name, level: levelParam(), limit: 1000 };
  const ticket = ++state.ticket;
  const r = await api("/api/latency" + query(params));
  if (seq !== state.seq || ticket !== state.ticket) return;
  showError(null);
  const xRange = state.latency.xRange;
  xRange.splice(0, 2, seriesStart(r) / 1e9, r.to_ns / 1e9);
  const key = [state.range, r.stages.map((s) => s.stage).join(",")].join("|");
  if (body.dataset.key === key && state.charts.length === r.stages.length) {
    const byName = new Map(state.charts.map((c) => [c.root.parentElement.dataset.chart, c]));
    document.getElementById("latency-summary").replaceWith(latencySummary(r));
    for (const s of r.stages) {
      const sec = body.querySelector(`section[data-stage="${CSS.escape(s.stage)}"]`);
      sec.querySelector("table.stats").replaceWith(latencyStats(s.fleet));
      sec.querySelector("table.devices").replaceWith(latencyDevices(s));
      byName.get("latency:" + s.stage).setData(latencyData(s));
    }
    return;
  }
  destroyCharts();
  body.dataset.key = key;
  body.replaceChildren(latencySummary(r));
  if (!r.stages.length) body.append(el("p", { class: "muted", text: "No spans in this range." }));
  for (const s of r.stages) {
    const box = el("div", { class: "chart" });
    body.append(el("section", { class: "card stage", "data-stage": s.stage },
      el("h2", { text: s.stage }),
      el("div", { class: "split" },
        el("div", { class: "left" }, latencyStats(s.fleet), box),
        el("div", { class: "right table-wrap" }, latencyDevices(s)))));
    makeChart(box, {
      name: "latency:" + s.stage,
      series: [
        { label: "fleet p50", color: COLORS.p50 },
        { label: "fleet p99", color: COLORS.p99, width: 2 },
      ],
      data: latencyData(s),
      xRange,
      yFmt: fmtDuration,
    });
  }
}

/* ---- routing ------------------------------------------------------------------------------ */

function route() {
  const hash = location.hash || "#/";
  const doc = /^#\/device\/([^/]+)\/(profile|flight)\/([^/]+)$/.exec(hash);
  if (doc) {
    let id;
    let key;
    try {
      id = decodeURIComponent(doc[1]);
      key = decodeURIComponent(doc[3]);
    } catch (e) {
      setView("fleet", renderFleet);
      showError("not an address of the page: " + hash);
      return;
    }
    const render = doc[2] === "profile" ? renderProfile : renderFlight;
    setView(doc[2], (app, seq) => render(app, seq, id, key).catch((e) => {
      if (seq === state.seq) showError(e.message);
    }));
    return;
  }
  const m = /^#\/device\/(.+)$/.exec(hash);
  if (m) {
    let id;
    try {
      id = decodeURIComponent(m[1]);
    } catch (e) {
      setView("fleet", renderFleet);
      showError("not a device address: " + m[1]);
      return;
    }
    setView("device", (app, seq) => renderDevice(app, seq, id));
  } else if (hash === "#/latency") {
    setView("latency", renderLatency);
  } else {
    setView("fleet", renderFleet);
  }
}

window.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  showError(String(ev.reason && ev.reason.message ? ev.reason.message : ev.reason));
});
window.addEventListener("hashchange", route);
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    resizeCharts();
    if (state.onResize) state.onResize();
  }, 150);
});
route();
