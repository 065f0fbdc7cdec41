// One set's page: live progress. Polls /sets/<id>/state.json about every second; when the state changed, the
// page body is fetched again (/fragment) and swapped in, unless the reviewer is typing or an error is shown.
(function () {
  "use strict";
  var body = document.getElementById("set-body");
  if (!body) { return; }
  var setId = body.dataset.setId;
  var fingerprint = null;
  var live = function () { return document.getElementById("set-live"); };

  function busy() {
    var active = document.activeElement;
    if (active && active.tagName === "INPUT" && body.contains(active)) { return true; }
    var typed = Array.prototype.some.call(body.querySelectorAll("input[name]"), function (input) {
      if (input.type === "checkbox" || input.type === "radio") { return input.checked; }
      return input.type !== "hidden" && input.value.trim() !== "";
    });
    var shown = Array.prototype.some.call(body.querySelectorAll(".error[id^='error-']"), function (slot) {
      return slot.textContent.trim() !== "";
    });
    return typed || shown;
  }

  function set(id, text) { var el = document.getElementById(id); if (el) { el.textContent = text; } }

  function refresh() {
    return fetch("/sets/" + encodeURIComponent(setId) + "/fragment", { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#set-body");
        if (!fresh) { return; }
        body.replaceWith(fresh);
        body = fresh;
        window.popconReview.startPreviews(body);
      });
  }

  function poll() {
    fetch("/sets/" + encodeURIComponent(setId) + "/state.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (state) {
        set("set-phase", state.phase);
        set("set-progress", state.frames_done + "/" + state.frames_total + " frames ready");
        var bar = document.getElementById("set-progress-bar");
        if (bar) { bar.max = Math.max(1, state.frames_total); bar.value = state.frames_done; }
        set("set-awaiting", state.awaiting.length ? "waiting for " + state.awaiting.join(", ") : "");
        set("set-notice", state.notice || "");
        var changed = fingerprint !== null && state.fingerprint !== fingerprint;
        fingerprint = state.fingerprint;
        var next = function () { if (!state.closed || changed) { setTimeout(poll, 1000); } };
        if (changed && !busy()) {
          set("set-live", "");
          refresh().then(next, next);
          return;
        }
        if (changed) { set("set-live", "changed: reload to see it"); }
        else if (!state.closed) { set("set-live", "live"); }
        else { set("set-live", ""); }
        next();
      })
      .catch(function () { set("set-live", "offline, retrying"); setTimeout(poll, 3000); });
  }

  poll();
})();
