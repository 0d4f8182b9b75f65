// The jobs page: queued and running jobs, polled every second; cancel buttons.
"use strict";

(function () {
  const body = document.querySelector("#active tbody");
  const note = document.getElementById("cancel-note");
  const POLL_MS = 1000;

  function cells(j) {
    const waiting = j.waiting ? `<div class="muted small">${KS.esc(j.waiting)}</div>` : "";
    const backend = j.best_backend ? ` <span class="muted small">${KS.esc(j.best_backend)}</span>` : "";
    return `<td>${j.id}</td>` +
      `<td><a href="/ui/problems/${j.problem_id}">${KS.esc(j.kind)} ${KS.esc(j.label)}</a></td>` +
      `<td class="small">${KS.esc(j.gpu || "any")}</td>` +
      `<td data-field="status">${KS.esc(j.status)}${waiting}</td>` +
      `<td data-field="stage">${KS.esc(j.stage)}</td>` +
      `<td class="num" data-field="trials">${j.trials_done} / ${j.trials_budget ?? "∞"}</td>` +
      `<td class="num" data-field="best">${KS.us(j.best_us)}${backend}</td>` +
      `<td class="num" data-field="speedup">${KS.times(j.speedup)}</td>` +
      `<td class="num" data-field="elapsed">${KS.secs(j.elapsed_s)}</td>` +
      `<td><button type="button" class="cancel" data-cancel="${j.id}">Cancel</button></td>`;
  }

  function show(jobs) {
    const seen = new Set();
    for (const j of jobs) {
      seen.add(String(j.id));
      let row = body.querySelector(`tr[data-job="${j.id}"]`);
      const html = cells(j);
      if (!row) {
        row = document.createElement("tr");
        row.dataset.job = j.id;
        body.appendChild(row);
      }
      if (row.dataset.html !== html) {
        const pending = row.querySelector("button.cancel.confirm");
        row.innerHTML = html;
        if (pending) arm(row.querySelector("button.cancel"));
        if (row.dataset.html) {
          row.classList.remove("flash");
          void row.offsetWidth;
          row.classList.add("flash");
        }
        row.dataset.html = html;
      }
    }
    for (const row of [...body.querySelectorAll("tr")]) {
      if (row.dataset.job ? !seen.has(row.dataset.job) : jobs.length) row.remove();
    }
    if (!jobs.length && !body.querySelector("tr")) {
      body.innerHTML = `<tr class="empty"><td colspan="10" class="muted">No job is queued or running.</td></tr>`;
    }
  }

  async function poll() {
    try {
      const data = await KS.json("/ui/api/jobs/active");
      show(data.jobs);
      document.getElementById("active-more").textContent = data.active > data.jobs.length
        ? `The ${data.jobs.length} oldest of ${data.active} active jobs.` : "";
      KS.clearError();
    } catch (err) {
      KS.showError(err);
    }
    setTimeout(poll, POLL_MS);
  }

  function arm(button) {
    button.classList.add("confirm");
    button.textContent = "Confirm cancel";
  }

  body.addEventListener("click", async (e) => {
    const button = e.target.closest("button.cancel");
    if (!button) return;
    if (!button.classList.contains("confirm")) {
      arm(button);
      setTimeout(() => {
        if (button.isConnected && button.classList.contains("confirm")) {
          button.classList.remove("confirm");
          button.textContent = "Cancel";
        }
      }, 5000);
      return;
    }
    const id = button.dataset.cancel;
    button.disabled = true;
    try {
      const job = await KS.json(`/v1/jobs/${id}/cancel`, { method: "POST" });
      note.textContent = `Job ${id} ${job.status}.`;
    } catch (err) {
      note.textContent = `Job ${id} was not cancelled: ${err.message}`;
      button.disabled = false;
    }
  });

  const tokenBox = document.getElementById("token");
  const tokenState = document.getElementById("token-state");
  const showToken = () => { tokenState.textContent = KS.token() ? "a token is saved" : ""; };
  document.getElementById("token-save").addEventListener("click", () => {
    KS.setToken(tokenBox.value.trim());
    tokenBox.value = "";
    showToken();
  });
  showToken();

  // the page came with the current state: hash each row so unchanged rows stay untouched
  setTimeout(poll, POLL_MS);
})();
