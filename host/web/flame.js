/*
 * flame.js - the stack profile view of the dashboard (#/device/<id>/profile/<key>): a profile
 * (/api/devices/<id>/profiles/<key>, edgemon/profile.h's JSON) drawn as interactive flame
 * graphs on canvas, with no library and nothing fetched but the API's JSON.
 *
 * The on-CPU graph is as wide as the profile's samples; the off-CPU time the profile marks on
 * its stacks (context-switch records) is a second graph of its own, as wide as that time, never
 * mixed into the samples. Both are flame graphs in the usual sense: the root ("all") at the
 * bottom, each stack's frames stacked root first, siblings merged by frame (kind and name) and
 * ordered by name, colours by kind (python green, native orange, kernel blue, unknown grey) with
 * the shade from a hash of the name, as edgemon-cli profile --svg draws them. A click on a frame
 * zooms into it (its ancestors stay drawn, full width), a click on "all" or Reset zooms out;
 * Search (a case-insensitive regular expression, or plain text when it is not one) paints the
 * matching frames purple and says their share of the graph (a match inside a match counts
 * once); hovering a frame says its samples (or off-CPU time) and share; Stage keeps the stacks
 * whose samples a span of that stage covered.
 *
 * The differential view colours the profile's own graph by each frame's change of share against
 * a baseline profile, as edgemon-cli profile --diff --svg does: frames are matched to the
 * baseline's by their path of frames from the root, the change is the frame's share of its
 * profile's samples minus its match's share of the baseline's (0 without a match), red grew,
 * blue shrank, deeper for a larger change against the largest one drawn. The baseline is the
 * device's previous profile whose trigger watched the same stage (the newest one older than
 * this one), or whichever profile of the device the user picks in Baseline (the CLI's
 * --diff-at TIME takes the profile nearest TIME: one of the same list). The flight recording
 * taken for the same breach (the list's link) opens from a button beside the title.
 *
 * Owns the view's DOM under the container app.js gives it, its canvases and their listeners.
 * Text from the device (function, module and stage names) only ever reaches the page through
 * textContent or the canvas's fillText. Uses app.js's el(), api(), muted(), badge(),
 * openButton(), canvasContext(), fmt*().
 */
"use strict";

const FLAME_ROW_PX = 18; // Height of one row of frames, CSS px.
const FLAME_MIN_PX = 0.3; // Frames narrower than this are not drawn.
const FLAME_SEARCH = "rgb(196, 64, 230)"; // A frame matching the search.
const FLAME_PROFILES_LISTED = 1000; // Profiles of the device read to find the baseline.

/* The fill of a frame by kind, its shade from a hash of its name (FNV-1a, as profile_svg.c). */
function flameFill(kind, name) {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ (name.charCodeAt(i) & 0xff), 16777619) >>> 0;
  const v = h % 64;
  if (kind === "python") return `rgb(${70 + v}, ${170 + (v >> 1)}, ${70 + (v >> 1)})`;
  if (kind === "native") return `rgb(225, ${90 + v * 2}, ${40 + (v >> 1)})`;
  if (kind === "kernel") return `rgb(${70 + (v >> 1)}, ${130 + v}, 215)`;
  return `rgb(${160 + (v >> 1)}, ${160 + (v >> 1)}, ${160 + (v >> 1)})`;
}

/* The fill of a frame in the differential view: delta points of share, max the largest change. */
function flameDiffFill(delta, max) {
  const k = max > 0 ? Math.min(1, Math.abs(delta) / max) : 0;
  const v = Math.round(230 - 190 * k);
  if (delta > 0) return `rgb(255, ${v}, ${v})`;
  if (delta < 0) return `rgb(${v}, ${v}, 255)`;
  return "rgb(230, 230, 230)";
}

/* The tree of a profile's stacks: value is each stack's samples ("cpu") or off_cpu_ns ("off");
 * stage, when given, keeps the stacks of that stage only. A node: {name, module, kind, value,
 * depth, parent, children (sorted by name), x (start as a fraction of the root)}. */
function flameTree(profile, mode, stage) {
  const root = { name: "all", module: null, kind: "all", value: 0, depth: 0, parent: null, kids: new Map() };
  let depth = 0;
  for (const s of profile.stacks) {
    if (stage && s.stage !== stage) continue;
    const v = mode === "off" ? s.off_cpu_ns : s.samples;
    if (!v) continue;
    root.value += v;
    let node = root;
    for (const i of s.frames) {
      const f = profile.frames[i];
      const key = f.kind + "\u0000" + f.name;
      let next = node.kids.get(key);
      if (!next) {
        next = { name: f.name, module: f.module, kind: f.kind, value: 0, depth: node.depth + 1, parent: node,
          kids: new Map() };
        node.kids.set(key, next);
      }
      next.value += v;
      node = next;
    }
    depth = Math.max(depth, node.depth);
  }
  const place = (n, x) => {
    n.x = x;
    n.children = [...n.kids.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    let at = x;
    for (const c of n.children) {
      place(c, at);
      at += root.value ? c.value / root.value : 0;
    }
  };
  place(root, 0);
  return { root, depth };
}

/* Per node of tree, the change of its share in points against base (a flameTree of the
 * baseline), matched by path from the root; returns {deltas: Map(node -> {delta, was}), max}. */
function flameDiff(tree, base) {
  const deltas = new Map();
  let max = 0;
  const total = tree.root.value;
  const btotal = base.root.value;
  const walk = (n, b) => {
    const now = total ? (100 * n.value) / total : 0;
    const was = b && btotal ? (100 * b.value) / btotal : 0;
    const delta = now - was;
    deltas.set(n, { delta, was });
    if (n.depth > 0) max = Math.max(max, Math.abs(delta));
    for (const [key, c] of n.kids) walk(c, b ? b.kids.get(key) : null);
  };
  walk(tree.root, base.root);
  return { deltas, max };
}

/* The nodes of tree whose name matches re (each with its top match: the first match on its
 * path from the root), and the share of the root they cover, a match within a match once. */
function flameMatches(tree, re) {
  const hit = new Set();
  let covered = 0;
  const walk = (n, inside) => {
    const m = n.depth > 0 && re.test(n.name);
    if (m) hit.add(n);
    if (m && !inside) covered += n.value;
    for (const c of n.children) walk(c, inside || m);
  };
  walk(tree.root, false);
  return { hit, share: tree.root.value ? covered / tree.root.value : 0 };
}

/* A search box's text as a case-insensitive RegExp: the text as a regular expression when it
 * is one, else the text literally; null for an empty box. */
function flameRegExp(text) {
  if (!text) return null;
  try {
    return new RegExp(text, "i");
  } catch (e) {
    return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
  }
}

/* One flame graph on a canvas in box: draw() paints it from the current tree, zoom, search and
 * diff; the canvas answers clicks (zoom) and hovers (the tip). opts: {mode: "cpu" | "off",
 * unit(value) -> text, onZoom()}. box.flameFrames() lists the frames drawn (CSS px, relative
 * to the canvas): what the page's tests click on. */
class FlameGraph {
  constructor(box, opts) {
    this.box = box;
    this.opts = opts;
    this.canvas = el("canvas", { class: "flame-canvas" });
    this.tip = el("div", { class: "flame-tip", hidden: true });
    box.append(this.canvas, this.tip);
    this.tree = null;
    this.focus = null;
    this.match = null;
    this.diff = null;
    this.drawn = [];
    this.canvas.addEventListener("click", (ev) => this.onClick(ev));
    this.canvas.addEventListener("mousemove", (ev) => this.onHover(ev));
    this.canvas.addEventListener("mouseleave", () => {
      this.tip.hidden = true;
    });
    box.flameFrames = () => this.drawn.map((d) => ({ name: d.node.name, depth: d.node.depth, x: d.x, y: d.y,
      w: d.w, h: d.h, value: d.node.value }));
  }

  setTree(tree) {
    this.tree = tree;
    this.focus = tree.root;
    this.box.dataset.zoom = "all";
  }

  zoom(node) {
    this.focus = node || (this.tree && this.tree.root);
    this.box.dataset.zoom = this.focus ? this.focus.name : "all";
    this.draw();
    if (this.opts.onZoom) this.opts.onZoom(this.focus);
  }

  /* The share of node in the graph, 0..1. */
  share(node) {
    return this.tree.root.value ? node.value / this.tree.root.value : 0;
  }

  draw() {
    const tree = this.tree;
    const width = Math.max(300, Math.floor(this.box.getBoundingClientRect().width));
    const height = (tree.depth + 1) * FLAME_ROW_PX + 4;
    const ctx = canvasContext(this.canvas, width, height);
    this.drawn = [];
    const f = this.focus;
    const fx = f.x;
    const fw = this.share(f) || 1;
    const onPath = new Set();
    for (let n = f; n; n = n.parent) onPath.add(n);
    const paint = (n) => {
      let x;
      let w;
      if (onPath.has(n) && n !== f) {
        x = 0;
        w = width; // an ancestor of the zoomed frame: full width
      } else {
        x = ((n.x - fx) / fw) * width;
        w = (this.share(n) / fw) * width;
      }
      if (w < FLAME_MIN_PX || x + w < 0 || x > width) return;
      const y = height - 2 - (n.depth + 1) * FLAME_ROW_PX;
      const h = FLAME_ROW_PX - 1;
      ctx.fillStyle = this.fillOf(n);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), h);
      if (w > 30) {
        ctx.save();
        ctx.beginPath();
        ctx.rect(x, y, w - 3, h);
        ctx.clip();
        ctx.fillStyle = "#1d2329";
        ctx.fillText(n.depth === 0 ? "all" : n.name, x + 3, y + h / 2 + 1);
        ctx.restore();
      }
      this.drawn.push({ node: n, x, y, w, h });
      const kids = onPath.has(n) && n !== f ? n.children.filter((c) => onPath.has(c)) : n.children;
      for (const c of kids) paint(c);
    };
    paint(tree.root);
  }

  fillOf(n) {
    if (this.match && this.match.hit.has(n)) return FLAME_SEARCH;
    if (n.depth === 0) return "rgb(200, 200, 200)";
    if (this.diff) return flameDiffFill(this.diff.deltas.get(n).delta, this.diff.max);
    return flameFill(n.kind, n.name);
  }

  hitAt(ev) {
    const r = this.canvas.getBoundingClientRect();
    const x = ev.clientX - r.left;
    const y = ev.clientY - r.top;
    for (let i = this.drawn.length - 1; i >= 0; i--) {
      const d = this.drawn[i];
      if (x >= d.x && x < d.x + d.w && y >= d.y && y < d.y + d.h) return { d, x, y };
    }
    return null;
  }

  onClick(ev) {
    const hit = this.hitAt(ev);
    if (hit) this.zoom(hit.d.node);
  }

  onHover(ev) {
    const hit = this.hitAt(ev);
    if (!hit) {
      this.tip.hidden = true;
      return;
    }
    const n = hit.d.node;
    const lines = [
      n.depth === 0 ? "all" : n.name,
      (n.module ? n.module + " · " : "") + (n.depth === 0 ? "" : n.kind),
      `${this.opts.unit(n.value)} · ${(this.share(n) * 100).toFixed(1)}% of the graph`,
    ];
    if (this.diff && n.depth > 0) {
      const d = this.diff.deltas.get(n);
      lines.push(`baseline ${d.was.toFixed(1)}% · change ${d.delta >= 0 ? "+" : ""}${d.delta.toFixed(1)} pts`);
    }
    this.tip.replaceChildren(...lines.filter(Boolean).map((t) => el("div", { text: t })));
    this.tip.hidden = false;
    const boxR = this.box.getBoundingClientRect();
    const r = this.canvas.getBoundingClientRect();
    const left = Math.min(hit.x + (r.left - boxR.left) + 12, boxR.width - 260);
    this.tip.style.left = Math.max(0, left) + "px";
    this.tip.style.top = hit.d.y + (r.top - boxR.top) - 4 - 16 * lines.length + "px";
  }
}

/* The baseline of the profile `key` in list (the device's profiles, newest first): the newest
 * profile older than it whose trigger names the same stage, or null. */
function flameBaseline(list, key) {
  const i = list.findIndex((p) => p.key === key);
  if (i < 0) return null;
  const me = list[i];
  return list.slice(i + 1).find((p) => p.time_ns < me.time_ns && (p.stage || null) === (me.stage || null)) || null;
}

/* Renders the profile view of device id's profile key into app (seq: the view's ticket). */
async function renderProfile(app, seq, id, key) {
  const enc = encodeURIComponent(id);
  const back = el("a", { href: deviceHref(id), class: "back", text: "← " + id });
  const body = el("div", { class: "flame-body" }, "Loading...");
  app.append(back, body);
  const [profile, list] = await Promise.all([
    api("/api/devices/" + enc + "/profiles/" + encodeURIComponent(key)),
    api("/api/devices/" + enc + "/profiles" + query({ limit: FLAME_PROFILES_LISTED })),
  ]);
  if (seq !== state.seq) return;
  const v = {
    profile,
    list: list.profiles,
    stage: "",
    search: "",
    mode: "kind", // "kind" or "diff"
    base: flameBaseline(list.profiles, key),
    baseProfile: null,
    graphs: {},
  };
  const title = el("div", { class: "device-head" },
    el("h1", { text: "Stack profile " + key }), badge(profile.trigger.level),
    muted(`${fmtTime(profile.time_ns)} · ${profile.trigger.cause}` +
      (profile.trigger.rule ? ` · ${profile.trigger.rule}` : "") +
      ` · ${profile.samples} samples at ${profile.hz} Hz over ${fmtDuration(profile.duration_ns)}` +
      (profile.lost ? ` · ${profile.lost} lost` : "")));
  const me = list.profiles.find((p) => p.key === key);
  if (me && me.flight) title.append(openButton("open-timeline", "Timeline of this breach", id, "flight", me.flight));
  const reason = profile.trigger.reason ? el("p", { class: "reason", text: profile.trigger.reason }) : null;
  const notes = (profile.notes || []).map((n) => el("p", { class: "note muted", text: "note: " + n }));
  const cut = profile.truncated || {};
  if (cut.stacks_cut) {
    notes.push(muted(`The size cap left out ${cut.stacks_cut} stacks (${cut.samples_cut} samples).`, "p"));
  }

  const stageSel = el("select", { name: "stage", onchange: (ev) => {
    v.stage = ev.target.value;
    rebuild();
  } }, el("option", { value: "", text: "all stages" }),
  ...profile.stages.map((s) => el("option", { value: s, text: s })));
  let debounce = null;
  const searchBox = el("input", { type: "search", name: "flame-search", placeholder: "function (regex)",
    oninput: (ev) => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        v.search = ev.target.value.trim();
        paint();
      }, 150);
    } });
  const found = el("span", { class: "flame-found", id: "flame-found" });
  const modeSel = el("select", { name: "colour", onchange: (ev) => {
    v.mode = ev.target.value;
    loadBase().catch((e) => showError(e.message));
  } }, el("option", { value: "kind", text: "by kind" }),
  el("option", { value: "diff", text: "against the baseline" }));
  const baseSel = el("select", { name: "baseline", onchange: (ev) => {
    v.base = v.list.find((p) => p.key === ev.target.value) || null;
    v.baseProfile = null;
    loadBase().catch((e) => showError(e.message));
  } }, el("option", { value: "", text: "none" }),
  ...v.list.filter((p) => p.key !== key).map((p) => el("option", { value: p.key,
    text: `${fmtTime(p.time_ns)} ${p.key}` + (p.stage ? ` (${p.stage})` : "") })));
  baseSel.value = v.base ? v.base.key : "";
  const baseNote = el("span", { class: "muted flame-base-note", id: "flame-base-note" });
  const legend = el("div", { class: "flame-legend", id: "flame-legend" });
  const toolbar = el("section", { class: "toolbar flame-toolbar" },
    el("label", {}, "Stage ", stageSel),
    el("label", {}, "Search ", searchBox), found,
    el("label", {}, "Colour ", modeSel),
    el("label", {}, "Baseline ", baseSel), baseNote);

  const makeCard = (mode, heading, unit) => {
    const box = el("div", { class: "flame", "data-flame": mode });
    const reset = el("button", { type: "button", class: "flame-reset", "data-reset": mode, text: "Reset zoom",
      onclick: () => v.graphs[mode].zoom(null) });
    const empty = el("p", { class: "muted flame-empty", hidden: true });
    const note = el("p", { class: "muted flame-note" });
    const card = el("section", { class: "card flame-card", "data-card": mode },
      el("h2", {}, heading, " ", reset), empty, note, box);
    v.graphs[mode] = new FlameGraph(box, { mode, unit, onZoom: () => paintFound() });
    v.graphs[mode].empty = empty;
    v.graphs[mode].note = note;
    v.graphs[mode].card = card;
    return card;
  };
  const hz = profile.hz || 1;
  const cpuCard = makeCard("cpu", "On-CPU samples", (n) =>
    `${n} ${n === 1 ? "sample" : "samples"} (~${fmtDuration((n / hz) * 1e9)})`);
  const offCard = makeCard("off", "Off-CPU time", (n) => fmtDuration(n) + " off-CPU");
  body.replaceChildren(...[title, reason, ...notes, toolbar, legend, cpuCard, offCard].filter(Boolean));

  function paintFound() {
    const re = flameRegExp(v.search);
    const parts = [];
    for (const [mode, g] of Object.entries(v.graphs)) {
      if (!g.tree || !g.tree.root.value) continue;
      g.match = re ? flameMatches(g.tree, re) : null;
      if (g.match) {
        parts.push(`${g.match.hit.size} ${g.match.hit.size === 1 ? "frame" : "frames"}, ` +
          `${(g.match.share * 100).toFixed(1)}% of ${mode === "cpu" ? "samples" : "off-CPU time"}`);
      }
    }
    const cpu = v.graphs.cpu.match;
    found.dataset.share = cpu ? cpu.share.toFixed(4) : "";
    found.dataset.frames = cpu ? String(cpu.hit.size) : "";
    found.textContent = re ? "matched: " + (parts.join("; ") || "nothing") : "";
  }

  function paint() {
    paintFound();
    for (const g of Object.values(v.graphs)) {
      if (g.tree && g.tree.root.value) g.draw();
    }
  }

  /* The trees for the stage chosen, the diff when the baseline is shown, then paint(). */
  function rebuild() {
    const diffing = v.mode === "diff" && v.baseProfile;
    for (const [mode, g] of Object.entries(v.graphs)) {
      const tree = flameTree(profile, mode, v.stage);
      const has = tree.root.value > 0;
      g.box.hidden = !has;
      g.empty.hidden = has;
      g.empty.textContent = mode === "cpu"
        ? "No on-CPU sample" + (v.stage ? " in stage " + v.stage : "") + "."
        : "No off-CPU time in this profile" + (v.stage ? " for stage " + v.stage : "") +
          " (it needs context-switch records).";
      const zoomed = g.tree && g.focus && g.focus.depth > 0 ? g.focus : null;
      g.setTree(tree);
      // Keep the zoom across a rebuild when the same frame (by path) is still there.
      if (zoomed) g.focus = flameFind(tree, zoomed) || tree.root;
      g.box.dataset.zoom = g.focus.name;
      // A baseline without any of this graph's time has nothing to compare it with.
      const base = diffing && has ? flameTree(v.baseProfile, mode, v.stage) : null;
      g.diff = base && base.root.value ? flameDiff(tree, base) : null;
      g.note.textContent = base && !base.root.value
        ? `The baseline has no ${mode === "cpu" ? "sample" : "off-CPU time"} here: coloured by kind.` : "";
    }
    legend.replaceChildren(...(diffing
      ? [el("span", { class: "swatch grew", text: "grew" }), el("span", { class: "swatch shrank", text: "shrank" }),
        muted(` share of samples against ${v.base.key} (${fmtTime(v.base.time_ns)}), deeper for more`)]
      : [["python", "python"], ["native", "native"], ["kernel", "kernel"], ["unknown", "unknown"]].map(([k, t]) =>
        el("span", { class: "swatch", style: "background:" + flameFill(k, ""), text: t }))));
    legend.dataset.mode = diffing ? "diff" : "kind";
    paint();
  }

  async function loadBase() {
    baseNote.textContent = v.base ? "" : "no earlier profile of this stage: pick one to compare";
    if (v.mode === "diff" && v.base && !v.baseProfile) {
      const want = v.base.key;
      const got = await api("/api/devices/" + enc + "/profiles/" + encodeURIComponent(want));
      if (seq !== state.seq || !v.base || v.base.key !== want) return;
      v.baseProfile = got;
    }
    rebuild();
  }

  rebuild();
  loadBase().catch((e) => showError(e.message));
  const onResize = () => {
    if (seq === state.seq) paint();
  };
  state.onResize = onResize;
}

/* The node of tree at the same path (kind and name from the root) as node of another tree. */
function flameFind(tree, node) {
  const path = [];
  for (let n = node; n && n.depth > 0; n = n.parent) path.unshift(n.kind + "\u0000" + n.name);
  let at = tree.root;
  for (const k of path) {
    at = at.kids.get(k);
    if (!at) return null;
  }
  return at;
}
