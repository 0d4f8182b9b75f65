// The shapes map: the served kernel's share of the roofline over two of the problem's
// fields, one cell per value pair, the most frequent verdict as a marker.
"use strict";

(async function () {
  const main = document.getElementById("main");
  const { gpu, kind, dtype } = main.dataset;
  const query = new URLSearchParams({ gpu, kind });
  if (dtype) query.set("dtype", dtype);
  let data;
  try {
    data = await KS.json(`/ui/api/shapes?${query}`);
  } catch (err) {
    KS.showError(err);
    return;
  }
  const chart = document.getElementById("chart-shapes");
  const cells = data.cells;
  if (!cells.length) {
    chart.textContent = `No decided ${kind} problem on ${gpu}${dtype ? " in " + dtype : ""}.`;
    return;
  }
  const [ax, ay] = data.axes;
  const SYMBOLS = { library_sufficient: "circle", custom_wins: "star",
    library_wins_after_search: "x" };
  const top = (c) => Object.entries(c.verdicts).sort((a, b) => b[1] - a[1])[0][0];
  const hover = (c) => `${ax}=${c.x}, ${ay}=${c.y}<br>${c.problems} problem(s)<br>` +
    `share of roofline: mean ${(100 * c.share_mean).toFixed(0)}%, ` +
    `${(100 * c.share_min).toFixed(0)}–${(100 * c.share_max).toFixed(0)}%<br>` +
    Object.entries(c.verdicts).filter(([, k]) => k).map(([v, k]) => `${v}: ${k}`).join("<br>");
  const xs = [...new Set(cells.map((c) => c.x))].sort((a, b) => a - b);
  const ys = [...new Set(cells.map((c) => c.y))].sort((a, b) => a - b);
  const grid = xs.length <= 80 && ys.length <= 80;
  const colour = { colorscale: "Viridis", cmin: 0, cmax: 1,
    colorbar: { title: { text: "share of roofline" }, tickformat: ".0%" } };
  const traces = [];
  if (grid) {
    const z = ys.map(() => xs.map(() => null));
    const text = ys.map(() => xs.map(() => ""));
    for (const c of cells) {
      z[ys.indexOf(c.y)][xs.indexOf(c.x)] = c.share_mean;
      text[ys.indexOf(c.y)][xs.indexOf(c.x)] = hover(c);
    }
    traces.push({ type: "heatmap", x: xs.map(String), y: ys.map(String), z, text,
      hovertemplate: "%{text}<extra></extra>", zmin: 0, zmax: 1, colorscale: "Viridis",
      colorbar: colour.colorbar, xgap: 1, ygap: 1 });
  }
  for (const [verdict, symbol] of Object.entries(SYMBOLS)) {
    const mine = cells.filter((c) => top(c) === verdict);
    if (!mine.length) continue;
    traces.push({
      type: "scatter", mode: "markers", name: verdict,
      x: mine.map((c) => (grid ? String(c.x) : c.x)), y: mine.map((c) => (grid ? String(c.y) : c.y)),
      customdata: mine.map((c) => c.problem_id), text: mine.map(hover),
      hovertemplate: "%{text}<extra></extra>",
      marker: grid ? { symbol, size: 9, color: "rgba(255,255,255,0.9)",
        line: { color: "#1d2330", width: 1 } }
        : { symbol, size: 11, color: mine.map((c) => c.share_mean), ...colour,
          showscale: verdict === "library_sufficient", line: { color: "#1d2330", width: 0.5 } },
    });
  }
  const axis = (title) => (grid ? { title: { text: title }, type: "category" }
    : { title: { text: title }, type: "log" });
  await Plotly.newPlot(chart, traces, {
    margin: { t: 20, r: 10, b: 60, l: 70 }, xaxis: axis(ax), yaxis: axis(ay),
    legend: { orientation: "h", y: -0.12 },
  }, KS.PLOT);
  const byXY = new Map(cells.map((c) => [`${c.x},${c.y}`, c.problem_id]));
  chart.on("plotly_click", (ev) => {
    const p = ev.points[0];
    const pid = p.customdata ?? byXY.get(`${p.x},${p.y}`);
    if (pid) location.href = `/ui/problems/${pid}?gpu=${encodeURIComponent(gpu)}`;
  });
})();
