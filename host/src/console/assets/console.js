// The Turnstile console's one script: the live counts of instances per state on the workflows
// page, from the server's SSE stream. Every page works without it; only the live updates need it.
"use strict";

(function () {
  const cells = document.querySelectorAll("td.count[data-workflow]");
  if (cells.length === 0 || typeof EventSource === "undefined") {
    return;
  }
  const status = document.getElementById("live-status");
  const source = new EventSource("/console/api/live");
  source.addEventListener("open", function () {
    if (status) {
      status.hidden = false;
      status.textContent = "Counts update live.";
    }
  });
  source.addEventListener("error", function () {
    if (status) {
      status.textContent = "Live updates interrupted; reconnecting…";
    }
  });
  source.addEventListener("counts", function (event) {
    let counts;
    try {
      counts = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    cells.forEach(function (cell) {
      const workflow = counts[cell.dataset.workflow];
      if (!workflow) {
        return;
      }
      const state = cell.dataset.state;
      const count = state === "" ? workflow.total : (workflow.states[state] || 0);
      const text = String(count);
      if (cell.textContent !== text) {
        cell.textContent = text;
        cell.classList.remove("changed");
        // Restart the highlight of a changed count.
        void cell.offsetWidth;
        cell.classList.add("changed");
      }
    });
  });
})();
