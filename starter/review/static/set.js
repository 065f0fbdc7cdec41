// One set's page, live. Polls /sets/<id>/state.json about every second; when the state changed it fetches the page
// body (/fragment, with the frame slots of the emoji the reviewer has open) and replaces only the parts
// (elements with data-part) whose HTML changed, keeping what the reviewer typed, the field being typed in, the
// sections they opened or folded and the refusals shown. Controls post in place (Accept: application/json): a
// refusal is shown next to its control with the typed text kept, a taken message updates the page at once.
(function () {
  "use strict";
  var body = document.getElementById("set-body");
  if (!body) { return; }
  var setId = body.dataset.setId;
  var base = "/sets/" + encodeURIComponent(setId);
  var fingerprint = null;
  var picks = null;
  var ownPick = null;        // {emoji, frame, candidate} of the reviewer's own pick, noted by the server already
  var folded = {};           // details id -> open, as the reviewer left it
  var seen = {};             // part id -> the HTML last rendered for it
  var refreshing = null;     // the fragment being fetched
  var queued = null;         // one more fetch after it (the open slots may have changed meanwhile)

  function byId(id) { return document.getElementById(id); }
  function text(id, value) { var el = byId(id); if (el) { el.textContent = value; } }
  function parts(root) { return Array.prototype.slice.call(root.querySelectorAll("[data-part]")); }

  function note(message) {
    if (!message) { return; }
    var item = document.createElement("p");
    item.className = "note-item";
    item.dataset.testid = "note";
    item.textContent = message;
    byId("notes").appendChild(item);
  }

  function openEmoji() {
    return Array.prototype.map.call(body.querySelectorAll("details.frames[open]"), function (d) {
      return d.dataset.emoji;
    });
  }

  // --- Replacing parts without losing what the reviewer is doing ---------------------------------------------

  function fieldKey(el) {
    var form = el.form ? el.form.getAttribute("action") : "";
    return el.getAttribute("data-testid") || (form + "|" + el.name);
  }

  function carry(from) {
    var kept = { fields: {}, errors: {}, focus: null, focused: null };
    from.querySelectorAll("input, textarea, select").forEach(function (el) {
      if (el.type === "hidden" || el.type === "submit") { return; }
      var changed = el.type === "checkbox" ? el.checked !== el.defaultChecked : el.value !== el.defaultValue;
      if (changed) { kept.fields[fieldKey(el)] = el.type === "checkbox" ? el.checked : el.value; }
      if (el === document.activeElement) {
        kept.focus = { key: fieldKey(el), start: el.selectionStart, end: el.selectionEnd };
      }
    });
    var active = document.activeElement;
    if (!kept.focus && active && from.contains(active)) { kept.focused = active.getAttribute("data-testid"); }
    from.querySelectorAll(".error[id^='error-']").forEach(function (slot) {
      if (slot.textContent.trim()) { kept.errors[slot.id] = slot.textContent; }
    });
    return kept;
  }

  function restore(into, kept) {
    into.querySelectorAll("input, textarea, select").forEach(function (el) {
      var key = fieldKey(el);
      if (Object.prototype.hasOwnProperty.call(kept.fields, key)) {
        if (el.type === "checkbox") { el.checked = kept.fields[key]; } else { el.value = kept.fields[key]; }
      }
      if (kept.focus && kept.focus.key === key) {
        el.focus();
        try { el.setSelectionRange(kept.focus.start, kept.focus.end); } catch (e) { /* not a text field */ }
      }
    });
    var again = kept.focused && into.querySelector('[data-testid="' + CSS.escape(kept.focused) + '"]');
    if (again) { again.focus({ preventScroll: true }); }
    Object.keys(kept.errors).forEach(function (id) {
      var slot = into.querySelector("#" + CSS.escape(id));
      if (slot && !slot.textContent.trim()) { slot.textContent = kept.errors[id]; }
    });
    into.querySelectorAll("details[id]").forEach(function (d) {
      if (Object.prototype.hasOwnProperty.call(folded, d.id)) { d.open = folded[d.id]; }
    });
  }

  function swap(old, fresh) {
    var kept = carry(old);
    old.replaceWith(fresh);
    restore(fresh, kept);
    if (window.popconReview) { window.popconReview.startPreviews(fresh); }
  }

  function fetchFragment(open) {
    var url = base + "/fragment" + (open.length ? "?open=" + open.map(encodeURIComponent).join(",") : "");
    return fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) { return null; }
        var holder = document.createElement("div");
        holder.innerHTML = html;
        return holder.querySelector("#set-body");
      });
  }

  function show(fresh) {
    var ids = function (root) { return parts(root).map(function (p) { return p.dataset.part; }).join(" "); };
    if (ids(fresh) !== ids(body)) {  // a section came or went: the body is replaced as a whole
      parts(fresh).forEach(function (p) { seen[p.dataset.part] = p.outerHTML; });
      swap(body, fresh);
      body = fresh;
      return;
    }
    parts(fresh).forEach(function (part) {
      var id = part.dataset.part, html = part.outerHTML;
      if (seen[id] === html) { return; }
      seen[id] = html;
      var old = body.querySelector('[data-part="' + CSS.escape(id) + '"]');
      if (old) { swap(old, part); }
    });
    body.dataset.closed = fresh.dataset.closed;
    body.dataset.fingerprint = fresh.dataset.fingerprint;
  }

  // Resolves to whether a fragment was shown (then the page shows the state of ``body.dataset.fingerprint``).
  function refresh() {
    if (refreshing) {
      var again = function () { queued = null; return refresh(); };
      queued = queued || refreshing.then(again, again);
      return queued;
    }
    refreshing = fetchFragment(openEmoji())
      .then(function (fresh) { if (fresh) { show(fresh); } return Boolean(fresh); })
      .finally(function () { refreshing = null; });
    return refreshing;
  }

  // --- Notes on picks that moved by themselves ---------------------------------------------------------------

  function spans(indices) {
    var runs = [];
    indices.forEach(function (i) {
      var last = runs[runs.length - 1];
      if (last && i === last[last.length - 1] + 1) { last.push(i); } else { runs.push([i]); }
    });
    return runs.map(function (r) { return r.length > 1 ? r[0] + "-" + r[r.length - 1] : String(r[0]); }).join(", ");
  }

  // Notes the automatic picks that moved since the last poll; none while the reviewer's own pick (whose note the
  // server gave) has not shown yet, nor in the poll that shows it.
  function movedPicks(now) {
    if (ownPick) {
      var mine = (now[ownPick.emoji] || [])[ownPick.frame];
      if (mine && mine[0] === ownPick.candidate) { ownPick = null; }
      return;
    }
    if (picks === null) { return; }
    Object.keys(now).forEach(function (emoji) {
      var before = picks[emoji] || [];
      var moved = [];
      now[emoji].forEach(function (pick, i) {
        if (before[i] && before[i][0] !== null && pick[0] !== before[i][0] && pick[1] === "auto") { moved.push(i); }
      });
      if (moved.length) {
        note("The automatic picks of " + emoji + " frames " + spans(moved) + " changed, to follow the newest " +
             "candidates and your picks.");
      }
    });
  }

  // --- Polling -----------------------------------------------------------------------------------------------

  function poll() {
    fetch(base + "/state.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (state) {
        text("set-progress", state.frames_done + "/" + state.frames_total + " frames ready");
        var bar = byId("set-progress-bar");
        if (bar) { bar.max = Math.max(1, state.frames_total); bar.value = state.frames_done; }
        var changed = state.fingerprint !== fingerprint;
        movedPicks(state.picks);
        picks = state.picks;
        var next = function () {
          text("set-live", state.closed ? "" : "live");
          if (!state.closed || changed) { setTimeout(poll, 1000); }
        };
        if (!changed) { next(); return; }
        refresh()  // the fingerprint moves only once its state is shown: a failed fetch is tried again
          .then(function (shown) { if (shown) { fingerprint = body.dataset.fingerprint; } })
          .then(next, next);
      })
      .catch(function () { text("set-live", "offline, retrying"); setTimeout(poll, 3000); });
  }

  // --- Posting in place --------------------------------------------------------------------------------------

  function showError(control, message) {
    var slot = byId("error-" + control) || byId("error-page");
    if (slot) {
      slot.textContent = message;
      slot.scrollIntoView({ block: "nearest" });
    }
  }

  function send(form, submitter) {
    var data = new FormData(form);
    if (submitter && submitter.name) { data.append(submitter.name, submitter.value); }
    var name = document.querySelector("[data-testid=reviewer-name]");
    if (name && name.value.trim() && !data.has("reviewer")) { data.append("reviewer", name.value.trim()); }
    ["error-" + form.dataset.control, "error-page"].forEach(function (id) { text(id, ""); });
    var action = form.getAttribute("action");
    var picked = action.match(/\/emoji\/([^/]+)\/frames\/(\d+)\/pick$/);
    var typed = Array.prototype.map.call(
      form.querySelectorAll("input[name=prompt], input[name=motion_prompt], input[name=reason]"), fieldKey);
    form.classList.add("sending");
    if (submitter) { submitter.disabled = true; }
    return fetch(action, {
      method: "POST", body: data, credentials: "same-origin", headers: { Accept: "application/json" }
    })
      .then(function (response) {
        return response.json().then(function (answer) { return { status: response.status, answer: answer }; });
      })
      .then(function (reply) {
        if (!reply.answer.ok) { showError(reply.answer.control || "page", reply.answer.error || "refused"); return; }
        // Sent: the text is cleared where it is now (a live update may have carried it into a new form).
        body.querySelectorAll("input").forEach(function (input) {
          if (typed.indexOf(fieldKey(input)) >= 0) { input.value = ""; input.defaultValue = ""; }
        });
        if (picked && submitter) {
          ownPick = { emoji: decodeURIComponent(picked[1]), frame: parseInt(picked[2], 10),
                      candidate: parseInt(submitter.value, 10) };
        }
        note(reply.answer.note);
        fingerprint = null;  // whatever the poll sees next is shown
        return refresh();
      })
      .catch(function () { showError("page", "the message could not be sent: check the connection and try again"); })
      .finally(function () {
        form.classList.remove("sending");
        if (submitter && submitter.isConnected) { submitter.disabled = false; }
      });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id === "reviewer-form") {
      event.preventDefault();
      var said = form.querySelector("[data-testid=reviewer-note]");
      fetch(form.getAttribute("action"),
            { method: "POST", body: new FormData(form), credentials: "same-origin", redirect: "manual" })
        .then(function (response) {
          var kept = response.ok || response.type === "opaqueredirect";
          said.textContent = kept ? "Kept: your approvals and cancels are signed with it."
                                  : "The name could not be kept (" + response.status + "): try again.";
        })
        .catch(function () { said.textContent = "The name could not be kept: check the connection."; });
      return;
    }
    if (!form.hasAttribute("data-inplace") || !body.contains(form)) { return; }
    event.preventDefault();
    send(form, event.submitter);
  });

  // --- Frame slots, loaded when an emoji's frames are opened -------------------------------------------------

  function openFrames(emoji, then) {
    var details = byId("frames-" + emoji);
    if (!details) { return; }
    details.open = true;
    folded[details.id] = true;
    var slots = details.querySelector("[data-part^='slots-']");
    var ready = slots && slots.dataset.loaded === "true" ? Promise.resolve() : refresh();
    ready.then(function () { if (then) { then(); } });
  }

  document.addEventListener("toggle", function (event) {
    var details = event.target;
    if (!(details instanceof HTMLDetailsElement) || !details.id) { return; }
    folded[details.id] = details.open;
    if (details.open && details.classList.contains("frames")) { openFrames(details.dataset.emoji); }
  }, true);

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a.strip-frame, a.load-slots");
    if (!link || !body.contains(link)) { return; }
    event.preventDefault();
    var emoji = link.dataset.emoji || link.closest("details.frames").dataset.emoji;
    openFrames(emoji, function () {
      var slot = link.dataset.frame !== undefined ? byId("slot-" + emoji + "-" + link.dataset.frame) : null;
      if (slot) { slot.scrollIntoView({ block: "center" }); slot.focus({ preventScroll: true }); }
    });
  });

  // What the server rendered, as the parts will be compared: the page's own parts have been changed by the
  // previews' script already. A fragment of the same state is the baseline; of a newer one, it is shown.
  fingerprint = body.dataset.fingerprint || null;
  fetchFragment(openEmoji()).then(function (fresh) {
    if (fresh && fresh.dataset.fingerprint === fingerprint) {
      parts(fresh).forEach(function (p) { seen[p.dataset.part] = p.outerHTML; });
    } else if (fresh) {
      show(fresh);
    }
  }).finally(poll);
})();
