// Live parts of the dashboard: every element with data-live="URL" is replaced, every few
// seconds, by the fragment the server renders at URL (the same template the page was built
// with). A fragment holding [data-final] is the last one: its tuning has ended.
"use strict";

const INTERVAL_MS = 2000;

function follow(element) {
  const url = element.dataset.live;
  async function refresh() {
    let response;
    try {
      response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    } catch (error) {
      element.dataset.liveError = String(error);
      setTimeout(refresh, INTERVAL_MS * 2);
      return;
    }
    if (response.status === 401) {  // logged out or token revoked: show the login page
      window.location.reload();
      return;
    }
    if (response.ok) {
      element.innerHTML = await response.text();
      delete element.dataset.liveError;
      element.dataset.refreshed = String(Number(element.dataset.refreshed || 0) + 1);
    } else {
      element.dataset.liveError = String(response.status);
    }
    if (!element.querySelector("[data-final]")) {
      setTimeout(refresh, INTERVAL_MS);
    }
  }
  if (!element.querySelector("[data-final]")) {
    setTimeout(refresh, INTERVAL_MS);
  }
}

document.querySelectorAll("[data-live]").forEach(follow);
