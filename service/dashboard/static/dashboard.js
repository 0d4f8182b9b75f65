// kernelsearch dashboard: what every page shares (formatting, fetching, copy buttons).
"use strict";

const KS = {
  /** Backends always drawn in the same colour. */
  COLOURS: {
    cublas: "#1f77b4", cutlass: "#9467bd", triton: "#2ca02c", triton_decode: "#17becf",
    sdpa_cudnn: "#1f77b4", sdpa_flash: "#8c564b", sdpa_efficient: "#bcbd22",
    sdpa_math: "#7f7f7f", flex: "#e377c2",
  },
  colour(backend, i) {
    const spare = ["#d62728", "#ff7f0e", "#393b79", "#637939", "#8c6d31"];
    return KS.COLOURS[backend] || spare[(i || 0) % spare.length];
  },
  /** Plotly's options on every chart: no logo, no link out, resizes with the page. */
  PLOT: { displaylogo: false, responsive: true, showLink: false, showSendToCloud: false },

  us(x) {
    if (x === null || x === undefined || !isFinite(x)) return "—";
    if (x >= 10000) return (x / 1000).toFixed(2) + " ms";
    return x < 1000 ? x.toFixed(2) + " µs" : x.toFixed(0) + " µs";
  },
  secs(s) {
    if (s === null || s === undefined) return "—";
    if (s >= 7200) return (s / 3600).toFixed(1) + " h";
    if (s >= 120) return (s / 60).toFixed(0) + " min";
    return s.toFixed(1) + " s";
  },
  times(x) { return x === null || x === undefined ? "—" : x.toFixed(3) + "×"; },
  esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  },

  /** The user token pasted on the jobs page (kept in this browser only), or "". */
  token() {
    try { return localStorage.getItem("ks-token") || ""; } catch (e) { return ""; }
  },
  setToken(value) {
    try {
      if (value) localStorage.setItem("ks-token", value); else localStorage.removeItem("ks-token");
    } catch (e) { /* storage disabled: the token lasts for this page only */ }
  },

  /** Fetch a JSON endpoint, with the user token as bearer when there is one; a failure
   *  rejects with the service's message. */
  async json(url, options) {
    const token = KS.token();
    const headers = Object.assign({}, (options || {}).headers,
                                  token ? { Authorization: `Bearer ${token}` } : {});
    const r = await fetch(url, Object.assign({}, options, { headers }));
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
      throw new Error(`${r.status}: ${detail || r.statusText}`);
    }
    return body;
  },
  showError(err) {
    const box = document.getElementById("error");
    if (box) { box.textContent = String(err.message || err); box.hidden = false; }
  },
  clearError() {
    const box = document.getElementById("error");
    if (box) box.hidden = true;
  },

  /** The copy buttons: data-copy names the element whose text is copied. */
  async copy(button) {
    const text = document.getElementById(button.dataset.copy).textContent;
    let done = false;
    try {
      await navigator.clipboard.writeText(text);
      done = true;
    } catch (_) {
      const area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      done = document.execCommand("copy");
      area.remove();
    }
    button.textContent = done ? "Copied" : "Select and copy";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  },
};

document.addEventListener("click", (e) => {
  const b = e.target.closest("button.copy");
  if (b) KS.copy(b);
});
