/*
 * timeline.js - the flight recording view of the dashboard (#/device/<id>/flight/<key>): one
 * recording (/api/devices/<id>/flights/<key>, edgemon/flight.h's JSON) drawn as a timeline on
 * canvas, with no library.
 *
 * At the top, the trigger (its level change, rule, value against bound, reason), the breach's
 * named cause (the recording's verdict, where it carries one) and the device's level changes
 * within the recording's window (/api/devices/<id>/history over it), each also a mark on the
 * time axis. Under them a lane per stage: every span a bar from its start for its duration on
 * the axis, its height its duration against the lane's scale, the stage's budget (the device's
 * birth, through the history; else the trigger's bound for the trigger's stage) a dashed line
 * across the lane, spans over it darker. The slowest frames (a frame: the spans sharing a
 * frame id, from the first start to the last end, as edgemon-cli flight counts them) are
 * outlined and marked on the axis. Under the lanes, a small chart per tick column on the same
 * axis (counters as their increase over the tick, as the JSON gives them). The trigger is a red
 * line across everything, time 0 of the axis.
 *
 * The wheel zooms around the pointer, a drag pans, a shift-drag zooms into the dragged range;
 * the buttons do the same in steps. A click on a span shows its frame: each stage's duration,
 * its total and start, and the figures of the tick whose window ((previous tick, tick]) holds
 * the frame's end, as edgemon-cli flight shows them. The stack profile taken for the same
 * breach (the list's link) opens from a button beside the title.
 *
 * Owns the view's DOM under the container app.js gives it, one canvas and its listeners. Text
 * from the device (stage and column names, reasons, verdicts) only ever reaches the page
 * through textContent or the canvas's fillText. Uses app.js's el(), api(), muted(), badge(),
 * verdictBlock(), openButton(), canvasContext(), fmt*().
 */
"use strict";

const TL_LEFT = 150; // Width of the lane labels, CSS px.
const TL_RIGHT = 36;
const TL_AXIS = 26; // Height of the time axis (top), CSS px.
const TL_MARKS = 18; // Height of the row of level changes and slow-frame marks.
const TL_LANE = 46; // Height of a stage's lane.
const TL_TICK = 34; // Height of a tick column's chart.
const TL_SLOWEST = 5; // Frames marked as the slowest.
const TL_COLUMNS_MAX = 24; // Tick columns charted; the others are listed by name.
const TL_STAGE_COLOURS = ["#2f6fde", "#2b8a3e", "#e8590c", "#8f5bd6", "#0c8599", "#c2255c", "#5c940d", "#495057"];
const TL_HISTORY_PAD_NS = 60e9; // The history read around the window (at least a minute).

/* Frames of a recording: per frame id its spans, first start, last end (t_ns from the trigger),
 * total and per-stage durations; ordered by frame id. */
function tlFrames(rec) {
  const byId = new Map();
  for (const s of rec.spans) {
    let f = byId.get(s.frame);
    if (!f) {
      f = { id: s.frame, start: s.t_ns, end: s.t_ns + s.duration_ns, stages: new Map(), spans: [] };
      byId.set(s.frame, f);
    }
    f.start = Math.min(f.start, s.t_ns);
    f.end = Math.max(f.end, s.t_ns + s.duration_ns);
    f.stages.set(s.stage, (f.stages.get(s.stage) || 0) + s.duration_ns);
    f.spans.push(s);
  }
  const frames = [...byId.values()].sort((a, b) => a.id - b.id);
  for (const f of frames) f.total = f.end - f.start;
  return frames;
}

/* The index of the tick whose window holds t (ns from the trigger), or -1 (edgemon-cli
 * flight's rule: the first tick at or after t, unless t is a period or more before the first). */
function tlTickAt(rec, t) {
  const i = rec.ticks.findIndex((k) => k.t_ns >= t);
  if (i < 0) return -1;
  if (i === 0 && rec.period_ns > 0 && rec.ticks[0].t_ns - t >= rec.period_ns) return -1;
  return i;
}

function tlFmtOffset(ns) {
  return (ns >= 0 ? "+" : "−") + fmtDuration(Math.abs(ns));
}

/* Nice axis steps: the round number of ns near span/target. */
function tlStep(span, target) {
  const raw = span / Math.max(1, target);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/* The timeline drawing of rec in box: lanes, ticks, marks; zoom and pan within [lo, hi] (ns
 * from the trigger). box.timelineSpans() lists the spans drawn (CSS px, relative to the
 * canvas): what the page's tests click on. */
class FlightTimeline {
  constructor(box, rec, opts) {
    this.box = box;
    this.rec = rec;
    this.opts = opts; // {budgets: Map(stage -> ns), changes: [{t, level, prev_level}], onFrame(f)}
    this.frames = tlFrames(rec);
    this.byId = new Map(this.frames.map((f) => [f.id, f]));
    this.slowest = new Set([...this.frames].sort((a, b) => b.total - a.total || a.id - b.id)
      .slice(0, TL_SLOWEST).map((f) => f.id));
    // What the recording holds: the window, widened to its first and last span or tick (a loop:
    // 65536 spans are too many arguments for Math.min).
    this.lo = -rec.pre_ns;
    this.hi = rec.post_ns;
    for (const s of rec.spans) {
      this.lo = Math.min(this.lo, s.t_ns);
      this.hi = Math.max(this.hi, s.t_ns + s.duration_ns);
    }
    for (const k of rec.ticks) {
      this.lo = Math.min(this.lo, k.t_ns - (rec.period_ns || 0));
      this.hi = Math.max(this.hi, k.t_ns);
    }
    if (!(this.hi > this.lo)) this.hi = this.lo + 1e9;
    this.from = this.lo;
    this.to = this.hi;
    this.stages = rec.stages;
    this.scale = new Map(); // per stage: the duration a full lane stands for
    for (const st of this.stages) this.scale.set(st, Math.max((opts.budgets.get(st) || 0) * 1.5, 1));
    for (const s of rec.spans) this.scale.set(s.stage, Math.max(this.scale.get(s.stage), s.duration_ns));
    this.columns = rec.columns.slice(0, TL_COLUMNS_MAX);
    this.selected = null;
    this.drawn = [];
    this.canvas = el("canvas", { class: "timeline-canvas", tabindex: 0 });
    this.tip = el("div", { class: "flame-tip", hidden: true });
    box.append(this.canvas, this.tip);
    box.timelineSpans = () => this.drawn.map((d) => ({ frame: d.span.frame, stage: d.span.stage,
      t_ns: d.span.t_ns, x: d.x, y: d.y, w: d.w, h: d.h }));
    this.listen();
  }

  height() {
    return TL_AXIS + TL_MARKS + this.stages.length * TL_LANE + 8 + this.columns.length * TL_TICK + 6;
  }

  xOf(t, width) {
    return TL_LEFT + ((t - this.from) / (this.to - this.from)) * (width - TL_LEFT - TL_RIGHT);
  }

  tOf(x, width) {
    return this.from + ((x - TL_LEFT) / (width - TL_LEFT - TL_RIGHT)) * (this.to - this.from);
  }

  /* Shows [from, to] (clamped to the recording, at least 1 µs wide) and redraws. */
  show(from, to) {
    const min = 1e3;
    let a = Math.max(this.lo, Math.min(from, to));
    let b = Math.min(this.hi, Math.max(from, to));
    if (b - a < min) {
      const mid = (a + b) / 2;
      a = mid - min / 2;
      b = mid + min / 2;
    }
    this.from = a;
    this.to = b;
    this.box.dataset.from = String(Math.round(a));
    this.box.dataset.to = String(Math.round(b));
    this.draw();
  }

  zoomBy(factor, atT) {
    const t = atT === undefined ? (this.from + this.to) / 2 : atT;
    this.show(t - (t - this.from) * factor, t + (this.to - t) * factor);
  }

  panBy(dt) {
    const w = this.to - this.from;
    let a = this.from + dt;
    a = Math.max(this.lo, Math.min(a, this.hi - w));
    this.show(a, a + w);
  }

  draw() {
    const width = Math.max(600, Math.floor(this.box.getBoundingClientRect().width));
    const height = this.height();
    this.width = width;
    const ctx = canvasContext(this.canvas, width, height);
    const right = width - TL_RIGHT;
    const X = (t) => this.xOf(t, width);
    this.drawn = [];

    // The axis: ticks at round offsets from the trigger.
    const step = tlStep(this.to - this.from, (right - TL_LEFT) / 90);
    ctx.strokeStyle = "#e3e6ea";
    ctx.fillStyle = "#6c757d";
    ctx.textAlign = "center";
    for (let t = Math.ceil(this.from / step) * step; t <= this.to; t += step) {
      const x = X(t);
      ctx.beginPath();
      ctx.moveTo(x, TL_AXIS - 4);
      ctx.lineTo(x, height);
      ctx.stroke();
      ctx.fillText(Math.abs(t) < step / 1e6 ? "0" : tlFmtOffset(t), x, TL_AXIS / 2);
    }
    ctx.textAlign = "left";

    // The marks row: level changes and the slowest frames.
    const marksY = TL_AXIS;
    ctx.fillStyle = "#495057";
    ctx.fillText("changes, slowest", 6, marksY + TL_MARKS / 2);
    for (const c of this.opts.changes) {
      if (c.t < this.from || c.t > this.to) continue;
      const x = X(c.t);
      ctx.fillStyle = LEVEL_COLOURS[c.level] || "#868e96";
      ctx.fillRect(x - 1, marksY + 2, 3, TL_MARKS - 4);
      ctx.fillText(c.level, x + 4, marksY + TL_MARKS / 2);
    }
    for (const id of this.slowest) {
      const f = this.byId.get(id);
      if (f.end < this.from || f.start > this.to) continue;
      const x = Math.max(TL_LEFT, X(f.start));
      ctx.fillStyle = "#c92a2a";
      ctx.beginPath();
      ctx.moveTo(x, marksY + TL_MARKS - 2);
      ctx.lineTo(x + 5, marksY + 4);
      ctx.lineTo(x + 10, marksY + TL_MARKS - 2);
      ctx.fill();
    }

    // A lane per stage.
    let y = TL_AXIS + TL_MARKS;
    this.laneTop = y;
    this.stages.forEach((st, i) => {
      const colour = TL_STAGE_COLOURS[i % TL_STAGE_COLOURS.length];
      const budget = this.opts.budgets.get(st) || 0;
      const full = this.scale.get(st);
      ctx.fillStyle = i % 2 ? "#fafbfc" : "#ffffff";
      ctx.fillRect(0, y, width, TL_LANE);
      ctx.fillStyle = "#1d2329";
      ctx.fillText(st, 6, y + 14);
      ctx.fillStyle = "#6c757d";
      ctx.fillText(budget ? "budget " + fmtDuration(budget) : "no budget", 6, y + 30);
      const base = y + TL_LANE - 3;
      const room = TL_LANE - 8;
      ctx.save();
      ctx.beginPath();
      ctx.rect(TL_LEFT, y, right - TL_LEFT, TL_LANE);
      ctx.clip();
      for (const s of this.rec.spans) {
        if (s.stage !== st) continue;
        const end = s.t_ns + s.duration_ns;
        if (end < this.from || s.t_ns > this.to) continue;
        const x0 = X(s.t_ns);
        const w = Math.max(1, X(end) - x0);
        const h = Math.max(2, Math.min(1, s.duration_ns / full) * room);
        const over = budget && s.duration_ns > budget;
        ctx.globalAlpha = over ? 1 : 0.7;
        ctx.fillStyle = over ? "#c92a2a" : colour;
        ctx.fillRect(x0, base - h, w, h);
        ctx.globalAlpha = 1;
        if (this.slowest.has(s.frame) || (this.selected && this.selected.id === s.frame)) {
          ctx.strokeStyle = this.selected && this.selected.id === s.frame ? "#f59f00" : "#1d2329";
          ctx.lineWidth = 1.5;
          ctx.strokeRect(x0, base - h, w, h);
          ctx.lineWidth = 1;
        }
        this.drawn.push({ span: s, x: x0, y: base - h, w, h });
      }
      if (budget) {
        const by = base - Math.min(1, budget / full) * room;
        ctx.strokeStyle = "#111";
        ctx.setLineDash([5, 4]);
        ctx.beginPath();
        ctx.moveTo(TL_LEFT, by);
        ctx.lineTo(right, by);
        ctx.stroke();
        ctx.setLineDash([]);
      }
      ctx.restore();
      y += TL_LANE;
    });

    // The tick columns, one small chart each.
    y += 8;
    for (const c of this.columns) {
      // A counter's first figure is its running total, not an increase: not charted.
      const pts = [];
      let first = c.kind === "counter";
      for (const k of this.rec.ticks) {
        const v = k.values[c.name];
        if (typeof v !== "number" || !isFinite(v)) continue;
        if (!first) pts.push([k.t_ns, v]);
        first = false;
      }
      ctx.fillStyle = "#1d2329";
      ctx.fillText(c.name, 6, y + 11);
      let lo = Math.min(...pts.map((p) => p[1]));
      let hi = Math.max(...pts.map((p) => p[1]));
      ctx.fillStyle = "#6c757d";
      const fmt = c.unit === "By" ? fmtBytes : (v) => fmtNumber(v) + (c.unit === "1" ? "" : " " + c.unit);
      ctx.fillText(pts.length ? `${fmt(lo)} … ${fmt(hi)}` + (c.kind === "counter" ? " /tick" : "") : "no figure",
        6, y + 24);
      if (hi === lo) {
        hi += 1;
        lo -= 1;
      }
      ctx.save();
      ctx.beginPath();
      ctx.rect(TL_LEFT, y, right - TL_LEFT, TL_TICK);
      ctx.clip();
      ctx.strokeStyle = "#e3e6ea";
      ctx.strokeRect(TL_LEFT, y + 1, right - TL_LEFT, TL_TICK - 4);
      ctx.strokeStyle = c.kind === "counter" ? "#8f5bd6" : "#0c8599";
      ctx.fillStyle = ctx.strokeStyle;
      ctx.beginPath();
      pts.forEach(([t, v], i) => {
        const px = X(t);
        const py = y + TL_TICK - 4 - ((v - lo) / (hi - lo)) * (TL_TICK - 8);
        if (i === 0) ctx.moveTo(px, py);
        else ctx.lineTo(px, py);
      });
      ctx.lineWidth = 1.5;
      ctx.stroke();
      ctx.lineWidth = 1;
      for (const [t, v] of pts) {
        const py = y + TL_TICK - 4 - ((v - lo) / (hi - lo)) * (TL_TICK - 8);
        ctx.fillRect(X(t) - 1.5, py - 1.5, 3, 3);
      }
      ctx.restore();
      y += TL_TICK;
    }

    // The trigger, across everything.
    if (this.from <= 0 && this.to >= 0) {
      const x = X(0);
      ctx.strokeStyle = "#e03131";
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(x, TL_AXIS);
      ctx.lineTo(x, height);
      ctx.stroke();
      ctx.lineWidth = 1;
      ctx.fillStyle = "#e03131";
      ctx.fillText("trigger", x + 4, TL_AXIS + TL_MARKS + 6);
    }
    if (this.drag && this.drag.select) {
      const a = Math.min(this.drag.x0, this.drag.x1);
      ctx.fillStyle = "rgba(47, 111, 222, 0.15)";
      ctx.fillRect(a, TL_AXIS, Math.abs(this.drag.x1 - this.drag.x0), height - TL_AXIS);
    }
  }

  spanAt(x, y) {
    for (let i = this.drawn.length - 1; i >= 0; i--) {
      const d = this.drawn[i];
      // A bar is hit anywhere in its lane's column above it, so short spans stay clickable.
      const laneTop = this.laneTop + this.stages.indexOf(d.span.stage) * TL_LANE;
      if (x >= d.x - 1 && x <= d.x + d.w + 1 && y >= laneTop && y < laneTop + TL_LANE) return d;
    }
    return null;
  }

  local(ev) {
    const r = this.canvas.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  }

  listen() {
    const c = this.canvas;
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const [x] = this.local(ev);
      const t = x >= TL_LEFT ? this.tOf(x, this.width) : undefined;
      this.zoomBy(ev.deltaY < 0 ? 0.8 : 1.25, t);
    }, { passive: false });
    c.addEventListener("mousedown", (ev) => {
      const [x] = this.local(ev);
      this.lastDragMoved = false;
      this.drag = { x0: x, x1: x, from: this.from, to: this.to, select: ev.shiftKey, moved: false };
    });
    window.addEventListener("mousemove", this.onMove = (ev) => {
      if (!this.drag) return this.hover(ev);
      const [x] = this.local(ev);
      this.drag.x1 = x;
      if (Math.abs(x - this.drag.x0) > 3) this.drag.moved = true;
      if (!this.drag.moved) return;
      if (this.drag.select) {
        this.draw();
      } else {
        const per = (this.drag.to - this.drag.from) / (this.width - TL_LEFT - TL_RIGHT);
        this.from = this.drag.from;
        this.to = this.drag.to;
        this.panBy(-(x - this.drag.x0) * per);
      }
    });
    window.addEventListener("mouseup", this.onUp = () => {
      const d = this.drag;
      this.drag = null;
      if (d && d.moved && d.select) {
        this.show(this.tOf(Math.min(d.x0, d.x1), this.width), this.tOf(Math.max(d.x0, d.x1), this.width));
      } else if (d && d.moved) {
        this.draw();
      }
      if (d) this.lastDragMoved = d.moved;
    });
    c.addEventListener("click", (ev) => {
      if (this.lastDragMoved) {
        this.lastDragMoved = false;
        return;
      }
      const [x, y] = this.local(ev);
      const hit = this.spanAt(x, y);
      if (!hit) return;
      this.selected = this.byId.get(hit.span.frame);
      this.draw();
      this.opts.onFrame(this.selected);
    });
    c.addEventListener("mouseleave", () => {
      this.tip.hidden = true;
    });
  }

  hover(ev) {
    if (!this.canvas.isConnected) return;
    const [x, y] = this.local(ev);
    const hit = x >= 0 && y >= 0 && x < this.width ? this.spanAt(x, y) : null;
    if (!hit) {
      this.tip.hidden = true;
      return;
    }
    const s = hit.span;
    this.tip.replaceChildren(el("div", { text: `${s.stage} · frame ${s.frame}` }),
      el("div", { text: `${fmtDuration(s.duration_ns)} at ${tlFmtOffset(s.t_ns)}` }));
    this.tip.hidden = false;
    this.tip.style.left = Math.min(x + 12, this.width - 200) + "px";
    this.tip.style.top = Math.max(0, hit.y - 40) + "px";
  }

  /* Drops the window's listeners (the view is going away). */
  destroy() {
    window.removeEventListener("mousemove", this.onMove);
    window.removeEventListener("mouseup", this.onUp);
  }
}

const LEVEL_COLOURS = { NOMINAL: "#2b8a3e", WARN: "#f59f00", DEGRADED: "#fd7e14", CRITICAL: "#e03131" };

/* The details of frame f of rec: its stages, total and start, the tick that holds its end. */
function tlFrameDetails(rec, f) {
  const rows = rec.stages.filter((st) => f.stages.has(st)).map((st) =>
    el("tr", { "data-stage": st }, el("td", { text: st }), el("td", { text: fmtDuration(f.stages.get(st)) })));
  rows.push(el("tr", { class: "total" }, el("td", { text: "total (first start to last end)" }),
    el("td", { text: fmtDuration(f.total) })));
  const box = el("section", { class: "card flight-frame", id: "flight-frame", "data-frame": f.id },
    el("h3", { text: `Frame ${f.id}: ${fmtDuration(f.total)}, starts ${tlFmtOffset(f.start)} from the trigger` }),
    el("table", { class: "stats frame-stages" }, headRow(["Stage", "Duration"]), el("tbody", {}, ...rows)));
  const i = tlTickAt(rec, f.end);
  if (i < 0) {
    box.append(muted("No tick of the recording holds this frame's end.", "p"));
    return box;
  }
  const tick = rec.ticks[i];
  const kinds = new Map(rec.columns.map((c) => [c.name, c]));
  const figs = Object.entries(tick.values).map(([name, v]) => {
    const c = kinds.get(name);
    const unit = c && c.unit !== "1" ? " " + c.unit : "";
    // A counter's first figure in the recording is its running total; the others increases.
    const first = !rec.ticks.slice(0, i).some((k) => typeof k.values[name] === "number");
    const shown = v === null ? "–" : (c && c.unit === "By" ? fmtBytes(v) : fmtNumber(v) + unit) +
      (c && c.kind === "counter" ? (first ? " (total)" : " (increase)") : "");
    return el("tr", { "data-column": name }, el("td", { text: name }), el("td", { text: shown }));
  });
  box.append(el("h3", { text: `Tick ${tlFmtOffset(tick.t_ns)} (its window holds the frame's end)` }),
    el("table", { class: "stats frame-tick" }, headRow(["Figure", "Value"]), el("tbody", {}, ...figs)));
  return box;
}

/* Renders the recording view of device id's recording key into app (seq: the view's ticket). */
async function renderFlight(app, seq, id, key) {
  const enc = encodeURIComponent(id);
  app.append(el("a", { href: deviceHref(id), class: "back", text: "← " + id }));
  const body = el("div", { class: "flight-body" }, "Loading...");
  app.append(body);
  const rec = await api("/api/devices/" + enc + "/flights/" + encodeURIComponent(key));
  if (seq !== state.seq) return;
  // The list's entry of the recording, for the stack profile of the same breach: asked around
  // its time (a JSON number near 2^60 is off by up to 256 ns).
  const at = BigInt(rec.time_ns);
  const around = await api("/api/devices/" + enc + "/flights" +
    query({ since: String(at - 1000n), until: String(at + 1000n), limit: 10 }));
  if (seq !== state.seq) return;
  const entry = around.flights.find((f) => f.key === key);
  // The device's budgets and level changes around the window; the recording stands without.
  let hist = null;
  const pad = Math.max(TL_HISTORY_PAD_NS, rec.pre_ns, rec.post_ns);
  try {
    hist = await api("/api/devices/" + enc + "/history" +
      query({ from: String(BigInt(rec.time_ns) - BigInt(pad)), to: String(BigInt(rec.time_ns) + BigInt(pad)),
        points: 10 }));
  } catch (e) {
    hist = null;
  }
  if (seq !== state.seq) return;
  const budgets = new Map();
  for (const s of (hist && hist.stages) || []) if (s.budget_ns) budgets.set(s.stage, s.budget_ns);
  const t = rec.trigger;
  if (t.stage && t.bound && !budgets.has(t.stage)) {
    budgets.set(t.stage, t.bound);
  }
  // Level changes within the recording's window, at their offset from the trigger (the
  // realtime of the trigger is the recording's time_ns).
  const lo = -rec.pre_ns;
  const hi = rec.post_ns;
  const changes = ((hist && hist.levels) || []).map((c) => ({ ...c, t: c.time_ns - rec.time_ns }))
    .filter((c) => c.t >= lo && c.t <= hi);
  if (!changes.some((c) => Math.abs(c.t) < 1e6) && rec.trigger.prev_level) {
    changes.push({ t: 0, level: t.level, prev_level: t.prev_level });
  }

  const head = el("div", { class: "device-head" }, el("h1", { text: "Flight recording " + key }), badge(t.level),
    muted(`${fmtTime(rec.time_ns)} · ${t.cause}` + (t.rule ? ` · ${t.rule}` : "") +
      ` · ${rec.spans.length} spans, ${rec.ticks.length} ticks, ${fmtDuration(rec.pre_ns)} before and ` +
      `${fmtDuration(rec.post_ns)} after the trigger`),
    entry && entry.profile ? openButton("open-flame", "Flame graph of this breach", id, "profile", entry.profile) : null);
  const trig = el("p", { class: "flight-trigger", id: "flight-trigger" },
    t.prev_level ? el("span", {}, badge(t.prev_level), " → ", badge(t.level)) : badge(t.level),
    " ", el("b", { text: t.rule || t.cause }),
    t.stage ? " on " + t.stage : "",
    t.value !== null && t.value !== undefined ? ` · ${fmtRuleValue(t.value, t)} against ${fmtRuleValue(t.bound, t)}` : "",
    t.reason ? el("span", { class: "reason", text: " · " + t.reason }) : null);
  const cause = el("section", { class: "latest-verdict", id: "flight-verdict" });
  if (rec.verdict) {
    const top = (rec.verdict.causes || [])[0];
    cause.append(el("h2", {}, "Cause: ", el("b", { class: "named-cause", text: top ? top.cause : "none measured" }),
      top ? " " + fmtShare(top.share) : ""), verdictBlock(rec.verdict));
  } else {
    cause.append(muted("This recording carries no verdict.", "p"));
  }
  const changeList = el("ul", { class: "flight-changes", id: "flight-changes" },
    ...changes.sort((a, b) => a.t - b.t).map((c) => el("li", { "data-level": c.level },
      muted(tlFmtOffset(c.t) + " "), c.prev_level && c.prev_level !== c.level
        ? el("span", {}, badge(c.prev_level), " → ", badge(c.level)) : badge(c.level),
      c.reason ? el("span", { class: "reason", text: " " + c.reason }) : null)));
  const cut = rec.truncated || {};
  const cutNote = cut.spans_cut || cut.ticks_cut || cut.spans_overwritten
    ? muted(`Left out: ${cut.spans_cut} spans and ${cut.ticks_cut} ticks by the size cap, ` +
      `${cut.spans_overwritten} spans overwritten in the agent's ring.`, "p") : null;

  const details = el("div", { class: "flight-frame-wrap" },
    muted("Click a span to see its frame and the tick's figures.", "p"));
  const box = el("div", { class: "timeline-box", id: "flight-timeline" });
  const buttons = el("div", { class: "ranges timeline-buttons" },
    el("button", { type: "button", "data-zoom": "in", text: "Zoom in", onclick: () => view.zoomBy(0.5) }),
    el("button", { type: "button", "data-zoom": "out", text: "Zoom out", onclick: () => view.zoomBy(2) }),
    el("button", { type: "button", "data-zoom": "reset", text: "Reset", onclick: () => view.show(view.lo, view.hi) }));
  const more = rec.columns.length > TL_COLUMNS_MAX
    ? muted(`Charted: the first ${TL_COLUMNS_MAX} of ${rec.columns.length} tick columns.`, "p") : null;
  const parts = [head, trig, cause, el("h2", { text: "Level changes in the window" }),
    changes.length ? changeList : muted("No level change within the window.", "p"),
    el("h2", {}, "Timeline ", muted("(wheel: zoom, drag: pan, shift-drag: zoom to the range)")),
    buttons, cutNote, more, el("div", { class: "card timeline-card" }, box), details];
  body.replaceChildren(...parts.filter(Boolean));
  const view = new FlightTimeline(box, rec, {
    budgets,
    changes,
    onFrame: (f) => details.replaceChildren(tlFrameDetails(rec, f)),
  });
  view.show(view.lo, view.hi);
  state.onResize = () => view.draw();
  state.onLeave = () => view.destroy();
}
