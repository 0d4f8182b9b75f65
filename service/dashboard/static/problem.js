// The problem page: convergence, every trial, the roofline and the verification, from
// /ui/api/problems/{id}/trials.
"use strict";

(async function () {
  const main = document.getElementById("main");
  const id = main.dataset.problem;
  const gpu = main.dataset.gpu;
  let data;
  try {
    data = await KS.json(`/ui/api/problems/${id}/trials?gpu=${encodeURIComponent(gpu)}`);
  } catch (err) {
    KS.showError(err);
    return;
  }
  const t = data.trials;
  const n = t.id.length;
  const index = t.id.map((_, i) => i + 1);
  const ok = (i) => t.status[i] === "ok" && t.median_us[i] !== null;
  const label = (i) => `trial ${i + 1} · ${t.backend[i]}${t.tier[i] ? " / " + t.tier[i] : ""}` +
    ` · job ${t.job_id[i]}<br>${KS.esc(JSON.stringify(t.config[i]))}`;
  document.getElementById("trial-count").textContent =
    `${data.total} kernel measurements of this problem on ${data.gpu}` +
    (data.shown < data.total ? ` (the first ${data.shown} drawn)` : "") + ".";

  // -- convergence ------------------------------------------------------------------------
  const best = [];
  let sofar = null;
  for (let i = 0; i < n; i++) {
    if (ok(i) && (sofar === null || t.median_us[i] < sofar)) sofar = t.median_us[i];
    best.push(sofar);
  }
  const conv = [{ x: index, y: best, name: "best so far", mode: "lines", line: { shape: "hv",
    color: "#2f6fde", width: 2 }, hovertemplate: "trial %{x}: %{y:.2f} µs<extra></extra>" }];
  if (data.library_best) {
    const lib = data.library_best;
    conv.push({ x: [1, Math.max(n, 2)], y: [lib.median_us, lib.median_us], mode: "lines",
      name: `library best (${lib.backend})`, line: { dash: "dash", color: "#c0392b" },
      hovertemplate: `library best ${lib.backend}: %{y:.2f} µs<extra></extra>` });
  }
  if (data.decision) {
    const pick = data.decision[data.decision.chosen] || {};
    const at = t.id.indexOf(pick.candidate_id);
    if (at >= 0 && t.median_us[at] !== null) {
      conv.push({ x: [at + 1], y: [t.median_us[at]], mode: "markers", name: "served",
        marker: { symbol: "star", size: 14, color: "#1b8a4c" },
        hovertemplate: `served: ${pick.backend} %{y:.2f} µs<extra></extra>` });
    }
  }
  Plotly.newPlot("chart-convergence", conv, {
    margin: { t: 10, r: 10, b: 40, l: 60 }, xaxis: { title: { text: "trial" } },
    yaxis: { title: { text: "µs" }, type: "log" }, legend: { orientation: "h", y: -0.2 },
  }, KS.PLOT);

  // -- every trial ---------------------------------------------------------------------------
  const okTimes = t.median_us.filter((x, i) => ok(i));
  const top = okTimes.length ? Math.max(...okTimes) * 1.6 : 1;
  const groups = new Map();
  for (let i = 0; i < n; i++) {
    const key = `${t.backend[i]} · ${ok(i) ? "ok" : t.status[i]}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(i);
  }
  const backends = [...new Set(t.backend)];
  const points = [...groups.entries()].map(([key, idx]) => {
    const failed = !ok(idx[0]);
    const b = t.backend[idx[0]];
    return {
      x: idx.map((i) => i + 1), y: idx.map((i) => (failed ? top : t.median_us[i])),
      name: key, mode: "markers", type: "scatter",
      marker: { color: KS.colour(b, backends.indexOf(b)), size: failed ? 9 : 6,
        symbol: failed ? "x" : "circle", opacity: 0.85 },
      text: idx.map((i) => label(i) + (failed ? `<br><b>${KS.esc(t.status[i])}</b>: ` +
        KS.esc(t.error[i] || "") : "")),
      hovertemplate: failed ? "%{text}<extra></extra>" : "%{text}<br>%{y:.2f} µs<extra></extra>",
    };
  });
  Plotly.newPlot("chart-trials", points, {
    margin: { t: 10, r: 10, b: 40, l: 60 }, xaxis: { title: { text: "trial" } },
    yaxis: { title: { text: "µs" }, type: "log" }, legend: { orientation: "h", y: -0.2 },
  }, KS.PLOT);

  // -- roofline -----------------------------------------------------------------------------
  const rf = data.roofline;
  if (!rf.missing) {
    const ai = rf.intensity;
    const bw = rf.bandwidth_gbs;
    const peaks = Object.entries(rf.peaks).filter(([, v]) => v > 0);
    const maxPeak = Math.max(...peaks.map(([, v]) => v));
    const xs = [ai / 300, ai * 300, maxPeak * 1000 / bw * 4].sort((a, b) => a - b);
    const x0 = Math.min(xs[0], maxPeak * 1000 / bw / 30);
    const x1 = Math.max(xs[2], ai * 10);
    const roof = (peak) => {
      const ridge = peak * 1000 / bw;
      return { x: [x0, ridge, x1], y: [x0 * bw / 1000, peak, peak] };
    };
    const lines = peaks.map(([prec, peak]) => ({
      ...roof(peak), mode: "lines", name: `${prec} ${peak.toFixed(0)} TFLOP/s`,
      line: { color: prec === rf.dtype ? "#1d2330" : "#a0a7b6",
        width: prec === rf.dtype ? 2.5 : 1, dash: prec === rf.dtype ? "solid" : "dot" },
      hovertemplate: `${prec} roof<extra></extra>`,
    }));
    const low = rf.peak_low[rf.dtype];
    if (low) {
      lines.push({ ...roof(low), mode: "lines", name: `${rf.dtype} lowest calibration pass`,
        line: { color: "#1d2330", width: 1, dash: "dash" }, hoverinfo: "skip" });
    }
    const byBackend = new Map();
    for (let i = 0; i < n; i++) {
      if (!ok(i)) continue;
      if (!byBackend.has(t.backend[i])) byBackend.set(t.backend[i], []);
      byBackend.get(t.backend[i]).push(i);
    }
    const flops = data.problem.flops;
    const spread = (i) => ai * Math.exp(((i * 0.618034) % 1 - 0.5) * 0.08);
    const cands = [...byBackend.entries()].map(([b, idx]) => ({
      x: idx.map(spread), y: idx.map((i) => flops / (t.median_us[i] * 1e-6) / 1e12),
      name: b, mode: "markers", marker: { color: KS.colour(b, backends.indexOf(b)), size: 7,
        opacity: 0.8 },
      text: idx.map((i) => label(i) + `<br>${KS.us(t.median_us[i])}`),
      hovertemplate: "%{text}<br>%{y:.1f} TFLOP/s<extra></extra>",
    }));
    Plotly.newPlot("chart-roofline", [...lines, ...cands], {
      margin: { t: 10, r: 10, b: 40, l: 60 },
      xaxis: { title: { text: "arithmetic intensity (FLOP / byte)" }, type: "log" },
      yaxis: { title: { text: "TFLOP/s" }, type: "log" }, legend: { font: { size: 10 } },
      annotations: [{ x: Math.log10(ai), y: 1, yref: "paper", text: `this problem (${rf.bound})`,
        showarrow: false, yanchor: "bottom", font: { size: 11 } }],
      shapes: [{ type: "line", x0: ai, x1: ai, y0: 0, y1: 1, yref: "paper",
        line: { color: "#6b7385", dash: "dot", width: 1 } }],
    }, KS.PLOT);
  } else {
    document.getElementById("chart-roofline").textContent = `No roofline: ${rf.missing}.`;
  }

  // -- verification ------------------------------------------------------------------------
  const v = data.decision && data.decision.verification;
  const fig = document.getElementById("verify-figure");
  if (v && v.library_us && v.library_us.length) {
    const d = data.decision;
    const side = (name, us, pick, colour) => ({
      x: us.map((_, i) => i + 1), y: us, mode: "lines+markers", name: pick ?
        `${name}: ${pick.backend}` : name, line: { color: colour },
      hovertemplate: `${name} round %{x}: %{y:.2f} µs<extra></extra>` });
    const sides = [side("library", v.library_us, d.library, "#c0392b")];
    if (v.custom_us && v.custom_us.length) sides.push(side("custom", v.custom_us, d.custom, "#2ca02c"));
    if (v.reference_us && v.reference_us.length) sides.push(side("reference", v.reference_us, d.reference, "#1f77b4"));
    Plotly.newPlot("chart-verify", sides, {
      margin: { t: 10, r: 10, b: 40, l: 60 }, xaxis: { title: { text: "round" }, dtick: 1 },
      yaxis: { title: { text: "µs" } }, legend: { orientation: "h", y: -0.2 },
    }, KS.PLOT);
  } else {
    fig.querySelector("figcaption").textContent =
      "Verification: not re-measured (the decision kept the library without a contest)";
    fig.querySelector(".chart").remove();
  }

  // -- failed trials -------------------------------------------------------------------------
  const body = document.querySelector("#failed tbody");
  const failed = index.map((x) => x - 1).filter((i) => t.status[i] !== "ok");
  document.getElementById("failed-count").textContent = `(${failed.length})`;
  body.innerHTML = failed.length ? failed.map((i) => `<tr><td>${i + 1}</td><td>${t.job_id[i]}</td>` +
    `<td>${KS.esc(t.backend[i])}</td><td>${KS.esc(t.status[i])}</td>` +
    `<td>${KS.esc(t.error[i] || "")}</td><td><code class="small">${KS.esc(JSON.stringify(t.config[i]))}` +
    `</code></td></tr>`).join("") : `<tr><td colspan="6" class="muted">none</td></tr>`;
})();
