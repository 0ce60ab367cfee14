// The what-if page of `gpualloc serve`: sends a scenario to POST /v1/compare and draws the plans it returns.
// Colours and legend words come from gpu_env.render.palette() (written into the page by the server), so the
// grids look like the report's figures: a colour per job in file order, real-time capacity hatched on the
// highest free GPUs of each slot (dense: serving, dotted: reserved and idle), inherited jobs dashed.
"use strict";

const DATA = JSON.parse(document.getElementById("gpualloc-data").textContent);
const P = DATA.palette;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function schedulerColours(names) {
  const out = {};
  const spare = [...P.spare];
  for (const name of names) out[name] = P.schedulers[name] || spare.shift() || "#555555";
  return out;
}

function textColour(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  return 0.299 * r + 0.587 * g + 0.114 * b > 0.55 ? "black" : "white";
}

// ------------------------------------------------------------------ controls

function setUp() {
  const select = $("scenario-select");
  for (const name of Object.keys(DATA.scenarios)) select.append(new Option(name, name));
  const boxes = $("scheduler-boxes");
  for (const name of DATA.schedulers) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    Object.assign(box, { type: "checkbox", value: name, id: `use-${name}`, checked: !DATA.exact.includes(name) });
    label.append(box, ` ${name}${DATA.exact.includes(name) ? " (exact)" : ""}`);
    boxes.append(label);
  }
  $("time-limit").max = DATA.max_time_limit;
  $("token-label").hidden = !DATA.token;
  $("scenario-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    $("scenario-text").value = await file.text();
    $("source-pasted").checked = true;
  });
  $("scenario-text").addEventListener("input", () => ($("source-pasted").checked = true));
  select.addEventListener("change", () => ($("source-shipped").checked = true));
  $("run").addEventListener("click", compare);
}

async function compare() {
  const status = $("status");
  const schedulers = DATA.schedulers.filter((name) => $(`use-${name}`).checked);
  if (!schedulers.length) {
    status.className = "error";
    status.textContent = "choose at least one scheduler";
    return;
  }
  const scenario = $("source-pasted").checked ? $("scenario-text").value : DATA.scenarios[$("scenario-select").value];
  const body = { scenario, schedulers, options: { time_limit: Number($("time-limit").value) } };
  const headers = { "Content-Type": "application/json" };
  if (DATA.token && $("token").value) headers.Authorization = `Bearer ${$("token").value}`;
  delete document.body.dataset.state;
  status.className = "";
  status.textContent = `planning with ${schedulers.join(", ")} ...`;
  $("run").disabled = true;
  try {
    const response = await fetch("/v1/compare", { method: "POST", headers, body: JSON.stringify(body) });
    const answer = await response.json();
    if (!response.ok) {
      const retry = response.headers.get("Retry-After");
      throw new Error(`${response.status}: ${answer.detail}${retry ? ` (retry after ${retry} s)` : ""}`);
    }
    show(answer);
    status.textContent = `done: ${Object.keys(answer.plans).length} plans`;
    document.body.dataset.state = "done";
  } catch (error) {
    status.className = "error";
    status.textContent = String(error.message || error);
    document.body.dataset.state = "error";
  } finally {
    $("run").disabled = false;
  }
}

// ------------------------------------------------------------------ results

function show(answer) {
  const sc = answer.scenario;
  const names = answer.table.map((row) => row.scheduler);
  const colours = schedulerColours(answer.schedulers);
  $("results").hidden = false;
  $("results-title").textContent =
    `${sc.name}: ${sc.cluster.gpus} GPUs x ${sc.horizon.slots} slots, ${sc.jobs.length} jobs, ` +
    `${(sc.realtime || []).length} real-time apps`;
  const tbody = $("metrics").querySelector("tbody");
  tbody.replaceChildren();
  for (const row of answer.table) {
    const tr = document.createElement("tr");
    tr.dataset.scheduler = row.scheduler;
    const cells = [
      row.objective.toFixed(2),
      row.job_value.toFixed(2),
      String(row.shortfall),
      `${(100 * row.utilization).toFixed(1)} %`,
      `${row.placed}/${row.jobs}`,
      `${row.completed}/${row.jobs}`,
      row.solve_ms == null ? "" : `${row.solve_ms.toFixed(1)} ms`,
      how(answer.plans[row.scheduler].info || {}),
    ];
    const first = document.createElement("td");
    first.innerHTML = `<span class="swatch" style="background:${colours[row.scheduler]}"></span>`;
    first.append(row.scheduler);
    tr.append(first);
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = ["objective", "job_value", "shortfall", "utilization", "placed", "completed", "solve_ms", "how"][i];
      tr.append(td);
    });
    tbody.append(tr);
  }
  $("errors").textContent = Object.entries(answer.errors).map(([k, v]) => `${k}: ${v}`).join("; ");
  drawLegend(sc, names.map((n) => answer.plans[n]));
  const axis = timeAxis(sc, names.map((n) => answer.plans[n]));
  const grids = $("grids");
  grids.replaceChildren();
  for (const name of names) grids.append(allocationPanel(sc, name, answer.plans[name], axis));
  const rt = $("realtime");
  rt.replaceChildren();
  (sc.realtime || []).forEach((app, i) => rt.append(realtimePanel(sc, app, i, names, answer.plans, colours, axis)));
  if (!(sc.realtime || []).length) rt.textContent = `${sc.name}: no real-time applications`;
}

// What the plan's info says about how it was made: the solver's status and gap; for ppo, the winning candidate
// (docs/learned-mode.md: candidate 0 is the argmax order) or the guard whose plan was worth more than every candidate.
function how(info) {
  if (info.status) {
    const gap = typeof info.gap === "number" && info.status !== "optimal" ? `, gap ${(100 * info.gap).toFixed(1)} %` : "";
    return `${info.status}${gap}`;
  }
  if (info.winner !== undefined) {
    if (typeof info.winner !== "number") return `the ${info.winner} guard won`;
    return info.samples === undefined ? `candidate ${info.winner} won` : `candidate ${info.winner} of ${info.samples} won`;
  }
  return "";
}

// One time axis for every panel: the horizon, or further when some plan's job runs past it, at one slot width,
// so that the grids and the real-time charts line up slot under slot.
function timeAxis(sc, plans) {
  const duration = new Map(sc.jobs.map((j) => [j.id, j.duration]));
  let slots = sc.horizon.slots;
  for (const plan of plans) for (const p of plan.placements) slots = Math.max(slots, p.start + duration.get(p.job));
  return { slots, cw: Math.max(3, Math.min(18, 560 / slots)), left: 34, hours: (sc.horizon.slot_minutes || 60) / 60 };
}

// The axis's ticks (hours) at height y, and its label at the foot of the picture.
function drawTimeTicks(svg, axis, y, H) {
  const { slots, cw, left, hours } = axis;
  const step = Math.max(1, Math.ceil(slots / 12));
  for (let t = 0; t <= slots; t += step)
    svg.append(el("text", { x: left + t * cw, y, "font-size": 9, "text-anchor": "middle", class: "tick" }, `${+(t * hours).toFixed(2)}`));
  svg.append(el("text", { x: left + (slots * cw) / 2, y: H - 2, "font-size": 9, "text-anchor": "middle" }, "time (h)"));
}

// The legend of the report's allocation figure: an entry only for what some grid shows.
function drawLegend(sc, plans) {
  const legend = $("legend");
  legend.replaceChildren();
  const item = (style, label) => {
    const span = document.createElement("span");
    span.className = "item";
    span.innerHTML = `<span class="swatch" style="${style}"></span>`;
    span.append(label);
    legend.append(span);
  };
  (sc.realtime || []).forEach((app, i) => {
    const c = P.apps[i % P.apps.length];
    item(`background:${c}29;border-color:${c}`, `${app.name}: ${P.legend.serving}`);
    item(`background:white;border:1px dotted ${c}`, `${app.name}: ${P.legend.reserved}`);
  });
  if (sc.jobs.some((j) => j.running_on)) item("background:#dddddd;border:2px dashed #222", P.legend.inherited);
  const T = sc.horizon.slots;
  const byId = new Map(sc.jobs.map((j) => [j.id, j]));
  if (plans.some((p) => p.placements.some((q) => q.start + byId.get(q.job).duration > T)))
    item(`background:${P.past_horizon}`, P.legend.past);
  if (plans.some((p) => p.metrics.shortfall > 0)) item(`background:${P.unserved}`, P.legend.unserved);
}

// The grid of one plan: cells of the horizon (jobs, served, reserved) and job blocks running past it.
function cellGrid(sc, plan) {
  const G = sc.cluster.gpus, T = sc.horizon.slots;
  const index = new Map(sc.jobs.map((j, i) => [j.id, i]));
  const occupied = Array.from({ length: T }, () => new Uint8Array(G));
  for (const p of plan.placements) {
    const job = sc.jobs[index.get(p.job)];
    for (let t = Math.max(p.start, 0); t < Math.min(p.start + job.duration, T); t++)
      for (const g of p.gpus) if (g >= 0 && g < G) occupied[t][g] = 1;
  }
  const rt = []; // [t, g, app, served]
  const apps = sc.realtime || [];
  for (let t = 0; t < T; t++) {
    const free = [];
    for (let g = G - 1; g >= 0; g--) if (!occupied[t][g]) free.push(g);
    let pos = 0;
    apps.forEach((app, i) => {
      const r = (plan.realtime[app.name] || [])[t] || 0;
      const served = Math.min(r, app.demand[t]);
      for (let k = 0; k < r; k++) {
        if (pos < free.length) rt.push([t, free[pos], i, k < served]);
        pos++;
      }
    });
  }
  return { index, rt };
}

function patterns(svg, sc, id) {
  const defs = el("defs");
  (sc.realtime || []).forEach((_, i) => {
    const c = P.apps[i % P.apps.length];
    const served = el("pattern", { id: `${id}-s${i}`, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
    served.append(el("rect", { width: 6, height: 6, fill: c, "fill-opacity": P.served_alpha }));
    served.append(el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: c, "stroke-width": 1.4, "stroke-opacity": 0.75 }));
    const reserved = el("pattern", { id: `${id}-r${i}`, width: 5, height: 5, patternUnits: "userSpaceOnUse" });
    reserved.append(el("rect", { width: 5, height: 5, fill: "white" }));
    reserved.append(el("circle", { cx: 2.5, cy: 2.5, r: 0.8, fill: c, "fill-opacity": 0.6 }));
    defs.append(served, reserved);
  });
  svg.append(defs);
}

function allocationPanel(sc, name, plan, axis) {
  const G = sc.cluster.gpus, T = sc.horizon.slots, node = sc.cluster.node_size || G;
  const { index, rt } = cellGrid(sc, plan);
  const { slots: xmax, cw, left } = axis;
  const ch = Math.max(3, Math.min(16, 360 / G));
  const top = 14, W = left + cw * xmax + 6, H = top + ch * G + 26;
  const svg = el("svg", { width: W, height: H, class: "grid", "data-scheduler": name, "data-slots": xmax, "data-slot-width": cw });
  patterns(svg, sc, `p-${name}`);
  const y = (g) => top + (G - g) * ch; // GPU 0 at the bottom, as in the report
  svg.append(el("rect", { x: left + T * cw, y: top, width: (xmax - T) * cw, height: G * ch, fill: P.past_horizon }));
  for (const [t, g, i, served] of rt) {
    svg.append(el("rect", {
      x: left + t * cw, y: y(g + 1), width: cw, height: ch,
      fill: `url(#p-${name}-${served ? "s" : "r"}${i})`, class: served ? "served" : "reserved",
    }));
  }
  for (const p of plan.placements) {
    const i = index.get(p.job), job = sc.jobs[i];
    const lo = Math.min(...p.gpus), colour = P.jobs[i % P.jobs.length];
    const rect = el("rect", {
      x: left + p.start * cw, y: y(lo + p.gpus.length), width: job.duration * cw, height: p.gpus.length * ch,
      fill: colour, stroke: P.edge, "stroke-width": job.running_on ? 2 : 0.8, class: "job", "data-job": p.job,
    });
    if (job.running_on) rect.setAttribute("stroke-dasharray", "4 2");
    rect.append(el("title", {}, `${p.job}: start ${p.start}, GPUs ${p.gpus[0]}-${p.gpus[p.gpus.length - 1]}`));
    svg.append(rect);
    const label = job.id + (job.running_on ? "*" : "");
    if (label.length * 5.5 < job.duration * cw && ch * p.gpus.length >= 10) {
      svg.append(el("text", {
        x: left + (p.start + Math.min(job.duration, xmax - p.start) / 2) * cw, y: y(lo + p.gpus.length / 2) + 3,
        "text-anchor": "middle", "font-size": 9, fill: textColour(colour), "pointer-events": "none",
      }, label));
    }
  }
  for (let b = node; b < G; b += node)
    svg.append(el("line", { x1: left, x2: left + xmax * cw, y1: y(b), y2: y(b), stroke: P.node_boundary, "stroke-width": 1.4 }));
  svg.append(el("line", { x1: left + T * cw, x2: left + T * cw, y1: top, y2: top + G * ch, stroke: P.horizon_line, "stroke-dasharray": "2 2" }));
  svg.append(el("rect", { x: left, y: top, width: xmax * cw, height: G * ch, fill: "none", stroke: "#444" }));
  (sc.realtime || []).length && (() => {
    for (let t = 0; t < T; t++) {
      const short = sc.realtime.reduce((s, app) => s + Math.max(0, app.demand[t] - ((plan.realtime[app.name] || [])[t] || 0)), 0);
      if (short > 0) svg.append(el("path", { d: `M${left + (t + 0.2) * cw},${top - 8} h${0.6 * cw} l${-0.3 * cw},6 z`, fill: P.unserved, class: "unserved" }));
    }
  })();
  drawTimeTicks(svg, axis, top + G * ch + 12, H);
  const ystep = [1, 2, 4, 8, 16, 32, 64, 128, G].find((s) => G / s <= 16);
  for (let g = 0; g < G; g += ystep)
    svg.append(el("text", { x: left - 4, y: y(g + 0.5) + 3, "font-size": 9, "text-anchor": "end" }, String(g)));
  const panel = document.createElement("div");
  panel.className = "panel";
  panel.dataset.scheduler = name;
  const title = document.createElement("h4");
  const m = plan.metrics;
  title.textContent = `${name}: objective ${m.objective.toFixed(1)}, utilisation ${(100 * m.utilization).toFixed(1)} %`;
  panel.append(title, svg);
  return panel;
}

function realtimePanel(sc, app, i, names, plans, colours, axis) {
  const T = sc.horizon.slots;
  const curves = names.map((n) => plans[n].realtime[app.name] || new Array(T).fill(0));
  const top = Math.max(1, ...app.demand, ...curves.flat()) * 1.12 + 0.5;
  const { slots, cw, left } = axis;
  const W = left + cw * slots + 6, H = 182, pad = 12, bottom = 32;
  const x = (t) => left + t * cw;
  const y = (v) => pad + (1 - v / top) * (H - pad - bottom);
  const stairs = (values) => {
    let d = `M${x(0)},${y(values[0])}`;
    values.forEach((v, t) => (d += ` H${x(t)} V${y(v)} H${x(t + 1)}`));
    return d;
  };
  const svg = el("svg", { width: W, height: H, class: "realtime", "data-app": app.name, "data-slots": slots, "data-slot-width": cw });
  svg.append(el("rect", { x: x(T), y: y(top), width: (slots - T) * cw, height: y(0) - y(top), fill: P.past_horizon }));
  svg.append(el("path", { d: `${stairs(app.demand)} V${y(0)} H${x(0)} Z`, fill: P.demand_fill, stroke: "none" }));
  svg.append(el("path", { d: stairs(app.demand), fill: "none", stroke: P.demand_line, "stroke-width": 1 }));
  const dashes = ["", "6 3", "6 2 2 2", "2 2"];
  names.forEach((n, j) => {
    svg.append(el("path", {
      d: stairs(curves[j]), fill: "none", stroke: colours[n], "stroke-width": 2, "stroke-dasharray": dashes[j % 4],
      class: "curve", "data-scheduler": n,
    }));
  });
  svg.append(el("line", { x1: left, x2: x(slots), y1: y(0), y2: y(0), stroke: "#444" }));
  for (let v = 0; v <= top; v += Math.max(1, Math.ceil(top / 5)))
    svg.append(el("text", { x: left - 4, y: y(v) + 3, "font-size": 9, "text-anchor": "end" }, String(v)));
  drawTimeTicks(svg, axis, y(0) + 12, H);
  const panel = document.createElement("div");
  panel.className = "panel";
  const title = document.createElement("h4");
  title.textContent = `${app.name}: ramp ${app.ramp} GPUs/slot, penalty ${app.penalty} per unserved GPU-slot`;
  const key = document.createElement("div");
  key.style.fontSize = "0.85em";
  key.innerHTML = `<span class="swatch" style="background:${P.demand_fill}"></span>demand `;
  names.forEach((n, j) => {
    const short = app.demand.reduce((s, d, t) => s + Math.max(0, d - curves[j][t]), 0);
    const idle = app.demand.reduce((s, d, t) => s + Math.max(0, curves[j][t] - d), 0);
    const span = document.createElement("span");
    span.innerHTML = ` <span class="swatch" style="background:${colours[n]}"></span>`;
    span.append(`${n}: shortfall ${short}, reserved idle ${idle} `);
    key.append(span);
  });
  panel.append(title, svg, key);
  return panel;
}

setUp();
