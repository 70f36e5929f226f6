// cgtool report: draws the graph and one replay's timeline from the JSON block #cgdata.
// No libraries, nothing fetched: the page works from disk and as a CI artifact.
// Big graphs: only the boxes and edges near the visible part of a scroll area are in the DOM
// (re-drawn on scroll, once per animation frame), so a 10,000-node graph stays responsive.
"use strict";
(function () {
  const errs = [];
  function fail(msg) {
    errs.push(msg);
    document.body.dataset.errors = errs.join("\n");
    const box = document.getElementById("errors");
    if (box) { box.hidden = false; box.textContent = "Script error (please report): " + errs.join("\n"); }
  }
  window.addEventListener("error", (e) => fail(String(e.message || e.error)));
  window.addEventListener("unhandledrejection", (e) => fail(String(e.reason)));

  const NW = 196, NH = 48, XS = 214, RH = 82, PAD = 24;
  const LIMIT = 1500;   // above this many drawables, draw only what is near the view
  const LH = 26, LABW = 96, AXH = 22;
  const TYPE_FILL = {kernel: "#cfe2ff", memcpy: "#d1e7dd", memset: "#e2f0d9", host: "#fff3cd",
    child_graph: "#e0cffc", empty: "#e9ecef", wait_event: "#f8d7da", event_record: "#f8d7da",
    mem_alloc: "#fde2c8", mem_free: "#fde2c8"};
  const RAMP = ["#ffffe5", "#fff1a8", "#fec44f", "#fe9929", "#ec7014", "#cc4c02"];

  const D = JSON.parse(document.getElementById("cgdata").textContent);
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const cut = (s, k) => (s.length > k ? s.slice(0, k - 1) + "…" : s);
  const fmt = (us) => (us == null ? "-" : us >= 1000 ? (us / 1000).toFixed(2) + " ms" : us.toFixed(us < 10 ? 2 : 1) + " µs");

  function hex(c) { return [1, 3, 5].map((k) => parseInt(c.slice(k, k + 2), 16)); }
  function mix(a, b, t) { const x = hex(a), y = hex(b); return "rgb(" + x.map((v, k) => Math.round(v + (y[k] - v) * t)).join(",") + ")"; }

  let S = null;        // the section shown
  let G = null;        // its graph state: layout, boxes, edges
  let T = null;        // its timeline state
  let selected = -1;

  function prepare(sec) {
    if (sec._ready) return sec;
    const n = sec.n, preds = Array.from({length: n}, () => []), succs = Array.from({length: n}, () => []);
    for (let k = 0; k < sec.edges.length; k += 2) { preds[sec.edges[k + 1]].push(sec.edges[k]); succs[sec.edges[k]].push(sec.edges[k + 1]); }
    sec.preds = preds; sec.succs = succs;
    sec.isCrit = new Uint8Array(n); sec.crit.forEach((i) => { sec.isCrit[i] = 1; });
    sec.critPair = new Set(); for (let k = 1; k < sec.crit.length; k++) sec.critPair.add(sec.crit[k - 1] * n + sec.crit[k]);
    const U = sec.units;
    sec.unitOf = new Int32Array(n);
    U.members.forEach((ms, u) => ms.forEach((i) => { sec.unitOf[i] = u; }));
    sec.dmin = 0; sec.dmax = 0;
    for (const d of sec.dur) if (d != null && d > 0) { sec.dmin = sec.dmin ? Math.min(sec.dmin, d) : d; sec.dmax = Math.max(sec.dmax, d); }
    sec.evOf = new Int32Array(n).fill(-1);
    if (sec.replay) sec.replay.node.forEach((i, k) => { if (sec.evOf[i] < 0) sec.evOf[i] = k; });
    sec.fakeIn = Array.from({length: n}, () => []);
    sec.fake.forEach((f) => sec.fakeIn[f[1]].push(f));
    sec.waitIn = Array.from({length: n}, () => []);
    sec.waits.forEach((w) => sec.waitIn[w[0]].push(w));
    sec.unfolded = new Set();
    sec._ready = true;
    return sec;
  }

  function colour(i) {
    const d = S.dur[i];
    if (d == null) return S.dmax > 0 ? "#eeeeee" : (TYPE_FILL[S.type[i]] || "#dee2e6");
    return ramp(d);
  }
  function ramp(d) {
    if (!(S.dmax > S.dmin)) return RAMP[2];
    const t = Math.max(0, Math.min(1, Math.log(Math.max(d, S.dmin) / S.dmin) / Math.log(S.dmax / S.dmin)));
    const p = t * (RAMP.length - 1), k = Math.min(RAMP.length - 2, Math.floor(p));
    return mix(RAMP[k], RAMP[k + 1], p - k);
  }

  // ------------------------------------------------------------------ graph
  function layout() {
    const U = S.units, m = U.row.length;
    let nrows = 0; for (let u = 0; u < m; u++) nrows = Math.max(nrows, U.row[u] + 1);
    const extra = new Float64Array(nrows);
    S.unfolded.forEach((u) => { extra[U.row[u]] = Math.max(extra[U.row[u]], U.members[u].length - 1); });
    const rowY = new Float64Array(nrows + 1);
    for (let r = 0; r < nrows; r++) rowY[r + 1] = rowY[r] + (1 + extra[r]) * RH;
    let xmin = 0, xmax = 0; for (let u = 0; u < m; u++) { xmin = Math.min(xmin, U.x[u]); xmax = Math.max(xmax, U.x[u]); }
    const boxes = [], nodeBox = new Int32Array(S.n);
    for (let u = 0; u < m; u++) {
      const ms = U.members[u], x = PAD + (U.x[u] - xmin) * XS, y = PAD + rowY[U.row[u]];
      if (ms.length > 1 && !S.unfolded.has(u)) {
        ms.forEach((i) => { nodeBox[i] = boxes.length; });
        boxes.push({u: u, i: -1, x: x, y: y, crit: ms.some((i) => S.isCrit[i])});
      } else {
        ms.forEach((i, k) => { nodeBox[i] = boxes.length; boxes.push({u: u, i: i, x: x, y: y + k * RH, crit: !!S.isCrit[i]}); });
      }
    }
    const edges = [], seen = new Set(), M = boxes.length + 1;
    for (let k = 0; k < S.edges.length; k += 2) {
      const a = S.edges[k], b = S.edges[k + 1], ba = nodeBox[a], bb = nodeBox[b];
      if (ba === bb || seen.has(ba * M + bb)) continue;
      seen.add(ba * M + bb);
      edges.push([ba, bb, S.critPair.has(a * S.n + b) ? 1 : 0]);
    }
    const fakes = [];
    S.fake.forEach((f) => { const ba = nodeBox[f[0]], bb = nodeBox[f[1]]; if (ba !== bb) fakes.push([ba, bb, f]); });
    G = {boxes: boxes, nodeBox: nodeBox, edges: edges, fakes: fakes,
      w: 2 * PAD + (xmax - xmin) * XS + NW, h: 2 * PAD + rowY[nrows] - RH + NH};
    const svg = $("graph");
    svg.setAttribute("width", G.w); svg.setAttribute("height", G.h);
    $("gwrap").style.height = Math.min(640, G.h + 20) + "px";
    svg.dataset.boxes = boxes.length; svg.dataset.virtual = boxes.length + edges.length > LIMIT ? "1" : "0";
  }

  function boxSvg(b, k) {
    const cls = (b.crit ? " crit" : "") + (b.i >= 0 && b.i === selected ? " sel" : "");
    if (b.i < 0) {
      const ms = S.units.members[b.u], a = ms[0], z = ms[ms.length - 1];
      let tot = 0, any = false; ms.forEach((i) => { if (S.dur[i] != null) { tot += S.dur[i]; any = true; } });
      const fill = any ? ramp(tot / ms.length) : "#f1f3f5";
      return `<g class="fold${cls}" data-u="${b.u}" data-n="${ms.length}" data-b="${k}" transform="translate(${b.x},${b.y})">` +
        `<rect width="${NW}" height="${NH}" rx="8" fill="${fill}"/>` +
        `<text x="6" y="14">▸ ${ms.length} nodes  #${S.id[a]}…#${S.id[z]}</text>` +
        `<text x="6" y="28">${esc(cut(S.name[a], 30))}</text>` +
        `<text x="6" y="42">${any ? "Σ " + fmt(tot) + " · " : ""}click to unfold</text></g>`;
    }
    const i = b.i, src = S.srcl[i];
    return `<g class="node${cls}" data-i="${i}" data-b="${k}" transform="translate(${b.x},${b.y})">` +
      `<rect width="${NW}" height="${NH}" rx="3" fill="${colour(i)}"/>` +
      `<text x="6" y="14">#${S.id[i]} ${esc(cut(S.name[i], 26))}</text>` +
      `<text x="6" y="28">${src ? esc(cut(src, 32)) : esc(S.type[i])}</text>` +
      `<text x="6" y="42">${S.dur[i] != null ? fmt(S.dur[i]) : ""}</text></g>`;
  }

  function edgePath(a, b) {
    const x1 = a.x + NW / 2, y1 = a.y + NH, x2 = b.x + NW / 2, y2 = b.y, dy = Math.max(20, (y2 - y1) / 2);
    return `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 - dy} ${x2},${y2 - 2}`;
  }
  function fakePath(a, b) {
    // From the side of A that faces B to the side of B that faces A, bent so that arrows between
    // nodes of one row run through the gap below the row, not over the labels.
    const cx1 = a.x + NW / 2, cx2 = b.x + NW / 2;
    if (Math.abs(a.y - b.y) < 1) {
      const y = a.y + NH, bend = Math.min(RH - NH - 6, 16 + Math.abs(cx2 - cx1) / 20);
      return `M${cx1 + 12},${y} C${cx1 + 12},${y + 2 * bend} ${cx2 - 12},${y + 2 * bend} ${cx2 - 12},${y + 2}`;
    }
    const down = b.y > a.y, y1 = down ? a.y + NH : a.y, y2 = down ? b.y - 2 : b.y + NH + 2;
    const x1 = cx1 + 24, x2 = cx2 + 24, my = (y1 + y2) / 2;
    return `M${x1},${y1} C${x1 + 40},${my} ${x2 + 40},${my} ${x2},${y2}`;
  }

  function drawGraph() {
    const wrap = $("gwrap"), svg = $("graph"), virt = svg.dataset.virtual === "1";
    const x0 = virt ? wrap.scrollLeft - wrap.clientWidth : -Infinity, x1 = virt ? wrap.scrollLeft + 2 * wrap.clientWidth : Infinity;
    const y0 = virt ? wrap.scrollTop - wrap.clientHeight : -Infinity, y1 = virt ? wrap.scrollTop + 2 * wrap.clientHeight : Infinity;
    const inView = (xa, ya, xb, yb) => Math.max(xa, xb) + NW >= x0 && Math.min(xa, xb) <= x1 && Math.max(ya, yb) + NH >= y0 && Math.min(ya, yb) <= y1;
    const out = ['<defs><marker id="ah" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa0a6"/></marker>' +
      '<marker id="ahc" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#d62728"/></marker>' +
      '<marker id="ahf" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#ff7f0e"/></marker></defs>'];
    const B = G.boxes;
    let drawn = 0;
    for (const [a, b, c] of G.edges) {
      const A = B[a], Z = B[b];
      if (!inView(A.x, A.y, Z.x, Z.y)) continue;
      out.push(`<path class="edge${c ? " critedge" : ""}" d="${edgePath(A, Z)}" marker-end="url(#${c ? "ahc" : "ah"})"/>`);
    }
    for (let k = 0; k < B.length; k++) {
      const b = B[k];
      if (!inView(b.x, b.y, b.x, b.y)) continue;
      out.push(boxSvg(b, k)); drawn++;
    }
    for (const [a, b, f] of G.fakes) {
      const A = B[a], Z = B[b];
      if (!inView(A.x, A.y, Z.x, Z.y)) continue;
      out.push(`<path class="fake" data-a="${f[0]}" data-b="${f[1]}" d="${fakePath(A, Z)}" marker-end="url(#ahf)"><title>fake dependency: #${S.id[f[0]]} → #${S.id[f[1]]}, ${f[2]}× in the trace, ready work waited ${fmt(f[3])} on average</title></path>`);
    }
    svg.innerHTML = out.join("");
    svg.dataset.drawn = drawn;
    const folded = B.filter((b) => b.i < 0).length;
    $("gcount").textContent = `${S.n} nodes · ${B.length} boxes (${folded} folded)` + (svg.dataset.virtual === "1" ? " · drawing the visible part" : "");
  }

  let gPending = false;
  function onGraphScroll() { if (!gPending) { gPending = true; requestAnimationFrame(() => { gPending = false; if (G && $("graph").dataset.virtual === "1") drawGraph(); }); } }

  function legend() {
    const parts = [];
    if (S.dmax > 0) {
      parts.push(`<span>duration: <span class="ramp" style="background:linear-gradient(to right,${RAMP.join(",")})"></span> ${fmt(S.dmin)} … ${fmt(S.dmax)} (log)</span>`);
    } else {
      const types = [...new Set(S.type)];
      types.forEach((t) => parts.push(`<span><svg width="14" height="12"><rect width="14" height="12" fill="${TYPE_FILL[t] || "#dee2e6"}" stroke="#666"/></svg> ${esc(t)}</span>`));
      parts.push("<span>(no trace: not coloured by duration)</span>");
    }
    parts.push('<span><svg width="22" height="12"><rect x="1" y="1" width="20" height="10" fill="#fff" stroke="#d62728" stroke-width="3"/></svg> critical path</span>');
    parts.push('<span><svg width="22" height="12"><rect x="1" y="1" width="20" height="10" rx="3" fill="#f1f3f5" stroke="#666" stroke-dasharray="5 2"/></svg> folded chain (click)</span>');
    parts.push('<span><svg width="30" height="12"><path d="M0,6H28" stroke="#9aa0a6" stroke-width="1.5"/></svg> graph edge</span>');
    parts.push('<span><svg width="30" height="12"><path d="M0,6H28" stroke="#ff7f0e" stroke-width="2" stroke-dasharray="6 4"/></svg> fake dependency (serialized by the hardware, not the graph)</span>');
    parts.push("<span>#n: node id, as <code>cgtool deps</code> prints it</span>");
    $("legend").innerHTML = parts.join("");
  }

  // ------------------------------------------------------------------ timeline
  function tlayout(fit) {
    const R = S.replay, wrap = $("twrap");
    if (!R) { T = null; return; }
    let span = 0; R.e.forEach((e) => { span = Math.max(span, e); });
    if (fit || !T) T = {scale: Math.max(1e-6, (wrap.clientWidth - LABW - 30) / Math.max(span, 1e-3)), span: span};
    T.span = span;
    const svg = $("timeline");
    T.w = LABW + span * T.scale + 30; T.h = AXH + R.lanes.length * LH + 8;
    svg.setAttribute("width", T.w); svg.setAttribute("height", T.h);
    svg.dataset.virtual = R.node.length > LIMIT ? "1" : "0";
  }
  const tx = (t) => LABW + t * T.scale;
  const ty = (lane) => AXH + lane * LH;

  function drawTimeline() {
    const R = S.replay, svg = $("timeline");
    if (!R) { svg.innerHTML = ""; return; }
    const wrap = $("twrap"), virt = svg.dataset.virtual === "1";
    const x0 = virt ? wrap.scrollLeft - wrap.clientWidth : -Infinity, x1 = virt ? wrap.scrollLeft + 2 * wrap.clientWidth : Infinity;
    const out = ['<defs><marker id="tah" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa0a6"/></marker>' +
      '<marker id="taf" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#ff7f0e"/></marker></defs>'];
    // axis
    const step = niceStep(T.span / Math.max(2, (T.w - LABW) / 110));
    for (let t = 0; t <= T.span + 1e-9; t += step) {
      const x = tx(t); if (x < x0 || x > x1) continue;
      out.push(`<text class="axis" x="${x}" y="12">${fmt(t)}</text><path d="M${x},${AXH - 6}V${T.h}" stroke="#eee"/>`);
    }
    R.lanes.forEach((name, k) => {
      out.push(`<text class="lanelabel" x="4" y="${ty(k) + LH / 2 + 4}">${esc(name)}</text><path d="M${LABW},${ty(k) + LH}H${T.w}" stroke="#f0f0f0"/>`);
    });
    let drawn = 0, inWin = 0;
    for (let k = 0; k < R.node.length; k++) if (tx(R.e[k]) >= x0 && tx(R.s[k]) <= x1) inWin++;
    // Zoomed out over many events: one bar per pixel and lane at most, no dependency arrows
    // (zoom in for them), so the page never holds tens of thousands of sub-pixel elements.
    const dense = inWin > LIMIT, lastX = new Float64Array(R.lanes.length).fill(-1e9);
    for (let k = 0; k < R.node.length; k++) {
      const xs = tx(R.s[k]), xe = tx(R.e[k]);
      if (xe < x0 || xs > x1) continue;
      if (dense) { if (xe < lastX[R.lane[k]] + 1) continue; lastX[R.lane[k]] = Math.max(xe, xs + 1); }
      const i = R.node[k], w = Math.max(1, xe - xs), y = ty(R.lane[k]) + 3;
      out.push(`<rect class="ev${i === selected ? " sel" : ""}" data-i="${i}" x="${xs}" y="${y}" width="${w}" height="${LH - 6}" fill="${colour(i)}"/>`);
      if (w > 46) out.push(`<text x="${xs + 3}" y="${y + LH / 2 + 1}">${esc(cut("#" + S.id[i] + " " + S.name[i], Math.floor(w / 6.2)))}</text>`);
      drawn++;
    }
    const arrow = (a, b, cls, mk, title) => {
      const ka = S.evOf[a], kb = S.evOf[b];
      if (ka < 0 || kb < 0) return 0;
      const xa = tx(R.e[ka]), ya = ty(R.lane[ka]) + LH / 2, xb = tx(R.s[kb]), yb = ty(R.lane[kb]) + LH / 2;
      if (Math.max(xa, xb) < x0 || Math.min(xa, xb) > x1) return 0;
      const mx = (xa + xb) / 2, bend = ya === yb ? -LH * 0.6 : 0;
      out.push(`<path class="${cls}" data-a="${a}" data-b="${b}" d="M${xa},${ya} C${mx},${ya + bend} ${mx},${yb + bend} ${xb},${yb}" marker-end="url(#${mk})">${title ? "<title>" + title + "</title>" : ""}</path>`);
      return 1;
    };
    if ($("showdeps").checked && !dense) for (let k = 0; k < S.edges.length; k += 2) arrow(S.edges[k], S.edges[k + 1], "dep", "tah", "");
    if (!dense || S.fake.length <= LIMIT) S.fake.forEach((f) => arrow(f[0], f[1], "fakearrow", "taf", `fake: #${S.id[f[1]]} waited behind #${S.id[f[0]]} (${f[2]}× in the trace)`));
    svg.innerHTML = out.join("");
    svg.dataset.drawn = drawn;
    $("tcount").textContent = `${R.node.length} events on ${R.lanes.length} lane${R.lanes.length === 1 ? "" : "s"} · replay (correlation ${R.correlation}) of median span` +
      (dense ? " · zoomed out: bars merged per pixel, zoom in for arrows" : "");
  }
  function niceStep(x) { const p = Math.pow(10, Math.floor(Math.log10(Math.max(x, 1e-9)))); const f = x / p; return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p; }
  let tPending = false;
  function onTimelineScroll() { if (!tPending) { tPending = true; requestAnimationFrame(() => { tPending = false; if (T && $("timeline").dataset.virtual === "1") drawTimeline(); }); } }

  // ------------------------------------------------------------------ info, selection
  function nodeRef(i) { return `<a href="#" data-goto="${i}">#${S.id[i]}</a> ${esc(cut(S.name[i], 40))}`; }
  function info(i) {
    const R = S.replay, k = S.evOf[i], rows = [];
    rows.push(["kernel", esc(S.full[i])], ["type", esc(S.type[i])]);
    if (S.src[i]) rows.push(["source", esc(S.src[i])]);
    rows.push(["duration", S.dur[i] != null ? fmt(S.dur[i]) + " (mean over the replays)" : "not traced"]);
    if (S.isCrit[i]) rows.push(["", "<b style='color:#d62728'>on the critical path</b>"]);
    let h = `<h3>#${S.id[i]} ${esc(cut(S.name[i], 60))}</h3><table>` + rows.map(([a, b]) => `<tr><th>${a}</th><td>${b}</td></tr>`).join("") + "</table>";
    if (R && k >= 0) {
      h += `<p>in this replay: ${esc(R.lanes[R.lane[k]])}, ${fmt(R.s[k])} → ${fmt(R.e[k])}</p>`;
      let ready = 0;
      const ps = S.preds[i].map((p) => { const kp = S.evOf[p]; const e = kp >= 0 ? R.e[kp] : null; if (e != null) ready = Math.max(ready, e); return `<li>${nodeRef(p)}: ends at ${fmt(e)}</li>`; });
      h += `<h4>predecessors (${ps.length})</h4><ul>${ps.join("") || "<li>none: a root</li>"}</ul>`;
      h += `<p>ready at ${fmt(ready)}, started ${fmt(Math.max(0, R.s[k] - ready))} later</p>`;
      const before = []; // what ran just before it on its lane
      for (let j = 0; j < R.node.length; j++) if (R.lane[j] === R.lane[k] && R.e[j] <= R.s[k] + 0.5 && R.s[j] < R.s[k] && (before.length === 0 || R.e[j] >= R.e[before[0]])) before[0] = j;
      if (before.length) h += `<p>behind it on the lane: ${nodeRef(R.node[before[0]])} (ended ${fmt(R.e[before[0]])})</p>`;
    }
    const fk = S.fakeIn[i], wt = S.waitIn[i];
    if (fk.length) h += `<h4>waited behind (fake dependencies)</h4><ul>${fk.map((f) => `<li>${nodeRef(f[0])}: ${f[2]}×, ${fmt(f[3])} of waiting on average</li>`).join("")}</ul>`;
    if (wt.length) h += `<h4>waited behind (inferred from timing)</h4><ul>${wt.map((w) => `<li>${nodeRef(w[1])}: ${w[2]}×, ${fmt(w[3])} on average</li>`).join("")}</ul>`;
    const ss = S.succs[i];
    if (ss.length) h += `<h4>dependents (${ss.length})</h4><ul>${ss.slice(0, 30).map((s) => `<li>${nodeRef(s)}</li>`).join("")}${ss.length > 30 ? "<li>…</li>" : ""}</ul>`;
    $("info").innerHTML = h;
  }
  function foldInfo(u) {
    const ms = S.units.members[u];
    let tot = 0; ms.forEach((i) => { tot += S.dur[i] || 0; });
    const names = {}; ms.forEach((i) => { names[S.name[i]] = (names[S.name[i]] || 0) + 1; });
    $("info").innerHTML = `<h3>folded chain: ${ms.length} nodes</h3><p>#${S.id[ms[0]]} … #${S.id[ms[ms.length - 1]]}${tot ? ", Σ " + fmt(tot) : ""}</p><ul>` +
      Object.entries(names).sort((a, b) => b[1] - a[1]).slice(0, 12).map(([n, c]) => `<li>${c}× ${esc(n)}</li>`).join("") + "</ul><p class=hint>Click to unfold.</p>";
  }

  function select(i, scroll) {
    selected = i;
    const u = S.unitOf[i];
    if (S.units.members[u].length > 1 && !S.unfolded.has(u)) { S.unfolded.add(u); layout(); }
    if (scroll) {
      const b = G.boxes[G.nodeBox[i]], wrap = $("gwrap");
      wrap.scrollLeft = Math.max(0, b.x - wrap.clientWidth / 2); wrap.scrollTop = Math.max(0, b.y - wrap.clientHeight / 2);
      const k = S.evOf[i];
      if (T && k >= 0) { const tw = $("twrap"); tw.scrollLeft = Math.max(0, tx(S.replay.s[k]) - tw.clientWidth / 2); }
    }
    drawGraph(); drawTimeline(); info(i);
  }

  function hook() {
    const svg = $("graph"), tl = $("timeline");
    svg.addEventListener("mouseover", (e) => {
      const n = e.target.closest("[data-i]"); if (n) { info(+n.dataset.i); return; }
      const f = e.target.closest("[data-u]"); if (f) foldInfo(+f.dataset.u);
    });
    svg.addEventListener("click", (e) => {
      const f = e.target.closest("[data-u]");
      if (f) { S.unfolded.add(+f.dataset.u); layout(); drawGraph(); return; }
      const n = e.target.closest("[data-i]"); if (n) select(+n.dataset.i, true);
    });
    tl.addEventListener("mouseover", (e) => { const n = e.target.closest("[data-i]"); if (n) info(+n.dataset.i); });
    tl.addEventListener("click", (e) => { const n = e.target.closest("[data-i]"); if (n) select(+n.dataset.i, true); });
    $("info").addEventListener("click", (e) => { const a = e.target.closest("[data-goto]"); if (a) { e.preventDefault(); select(+a.dataset.goto, true); } });
    $("gwrap").addEventListener("scroll", onGraphScroll, {passive: true});
    $("twrap").addEventListener("scroll", onTimelineScroll, {passive: true});
    $("unfoldall").onclick = () => { S.units.members.forEach((ms, u) => { if (ms.length > 1) S.unfolded.add(u); }); layout(); drawGraph(); };
    $("foldall").onclick = () => { S.unfolded.clear(); layout(); drawGraph(); };
    $("zin").onclick = () => zoom(2); $("zout").onclick = () => zoom(0.5); $("zfit").onclick = () => { tlayout(true); drawTimeline(); };
    $("showdeps").onchange = () => drawTimeline();
    document.querySelectorAll(".tab").forEach((b) => { b.onclick = () => show(+b.dataset.sec); });
  }
  function zoom(f) { if (!T) return; const tw = $("twrap"), c = (tw.scrollLeft + tw.clientWidth / 2 - LABW) / T.scale; T.scale *= f; tlayout(false); tw.scrollLeft = Math.max(0, LABW + c * T.scale - tw.clientWidth / 2); drawTimeline(); }

  function show(k) {
    S = prepare(D.sections[k]); selected = -1; T = null;
    document.querySelectorAll(".tab").forEach((b) => b.classList.toggle("on", +b.dataset.sec === k));
    document.querySelectorAll("section.summary").forEach((s) => { s.hidden = +s.dataset.sec !== k; });
    $("glabel").textContent = "· " + S.label;
    $("gwrap").scrollTop = 0; $("gwrap").scrollLeft = 0; $("twrap").scrollLeft = 0;
    legend(); layout(); drawGraph();
    $("tnone").hidden = !!S.replay; $("twrap").hidden = !S.replay; $("ttools").hidden = !S.replay;
    $("rlabel").textContent = S.replay ? "· " + (S.trace || "") : "";
    tlayout(true); drawTimeline();
  }

  const t0 = performance.now();
  try {
    if (D.sections.length) {
      hook(); show(0);
      // report.html#unfold-all opens with every chain unfolded (benchmarks, links from CI).
      if (location.hash === "#unfold-all") $("unfoldall").onclick();
      // report.html#node=12 opens with node index 12 selected (its box unfolded, its details shown).
      const m = /^#node=(\d+)$/.exec(location.hash);
      if (m && +m[1] < S.n) select(+m[1], true);
    }
  } catch (e) { fail(String(e && e.stack || e)); }
  document.body.dataset.renderMs = String(Math.round(performance.now() - t0));
  document.body.dataset.ready = "1";
})();
