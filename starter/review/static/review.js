// popcon review: what every page shares, and the set page's tools for comparing candidates.
//
// Players: each <div class="player" data-emoji="wave" data-frames='[url or null, ...]' data-duration="ms"> plays its
// frames (nulls skipped) in all of its img.anim (img.dataset.frame = the frame index), with controls rendered into its
// .player-controls: step back, play / pause, step forward, speed, a frame counter and a marker for a swapped-in
// candidate. Each player's state (playing, speed, frame) lives in a map keyed by emoji, so it survives set.js
// replacing the page's parts; window.popconReview.startPreviews(root) (re)binds the players under root, keeping
// one timer per emoji.
// Comparing: hovering or focusing a candidate (.slot[data-emoji][data-frame] button.tile[data-candidate]) shows its
// data-image in the player at that frame until left (a paused player jumps there); hovering also shows a large
// "peek" beside it (pointer devices); its .enlarge button opens a dialog with the large image (data-large), its
// data-label and "Pick this one", which clicks the candidate's own submit button (set.js posts it in place).
// Keys (not while typing): j / k next / previous slot, 1-9 pick in the current slot, e enlarge the current slot's
// pick, p play / pause, , / . step, Shift+A approve, ? this list.
(function () {
  "use strict";
  var SPEEDS = [["0.25", "0.25×"], ["0.5", "0.5×"], ["1", "1×"], ["2", "2×"]];
  var PEEK_DELAY_MS = 200;
  var TILE = "button.tile[data-candidate]";
  var SHORTCUTS = [
    ["j / k", "next / previous frame slot"],
    ["1 – 9", "pick that candidate in the current slot"],
    ["e", "enlarge the current slot's pick (← / → browse)"],
    ["p", "play / pause the preview"],
    [", / .", "step the preview back / forward"],
    ["Shift + A", "approve the set"],
    ["?", "show / hide this list"],
    ["Esc", "close"]
  ];

  var players = {};  // emoji -> {frames, duration, playing, speed, index, timer, every}
  var sources = { shown: null, hover: null, focus: null };  // candidates swapped in: the dialog's, hovered, focused
  var seq = 0;  // orders the hovered and focused candidates
  var current = null;  // the current slot: {emoji, frame}
  var preloaded = {};
  var onScreen = {};       // emoji -> whether its player is on or near the screen
  var watcher = window.IntersectionObserver ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      var name = entry.target.dataset.emoji;
      if (!entry.target.isConnected || !players[name]) { return; }
      onScreen[name] = entry.isIntersecting;
      if (entry.isIntersecting) { preload(name); }
      update(name);
    });
  }, { rootMargin: "200px" }) : null;
  var dialog = null, help = null, helpToggle = null;  // created once, when first needed
  var peek = null, peekTimer = null, peekKey = null, peekTile = null, peekEmoji = null;

  // --- small helpers -------------------------------------------------------------------------------------------

  function make(tag, attrs, text) {
    var el = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) { el.setAttribute(name, attrs[name]); });
    if (text) { el.textContent = text; }
    return el;
  }

  function all(root, selector) {
    var found = Array.prototype.slice.call(root.querySelectorAll(selector));
    if (root.matches && root.matches(selector)) { found.unshift(root); }
    return found;
  }

  function ofEmoji(name) { return "[data-emoji=\"" + CSS.escape(name) + "\"]"; }
  function playerEls(name) { return Array.prototype.slice.call(document.querySelectorAll(".player" + ofEmoji(name))); }

  function slotEl(emoji, frame) {
    return document.querySelector(".slot" + ofEmoji(emoji) + "[data-frame=\"" + frame + "\"]");
  }

  function tileOf(info) {
    var slot = info && slotEl(info.emoji, info.frame);
    return slot && slot.querySelector(TILE + "[data-candidate=\"" + CSS.escape(info.candidate) + "\"]");
  }

  // The candidate button an element belongs to: the tile itself, or its .enlarge button, refine link...
  function tileNear(el) {
    if (!(el instanceof Element)) { return null; }
    var tile = el.closest(TILE);
    if (tile) { return tile; }
    var box = el.closest(".slot .candidate");
    return box && box.querySelector(TILE);
  }

  function infoOf(tile) {
    var slot = tile && tile.closest(".slot[data-emoji][data-frame]");
    if (!slot) { return null; }
    var img = tile.querySelector("img");
    var image = tile.dataset.image || (img && img.getAttribute("src")) || "";
    return {
      emoji: slot.dataset.emoji, frame: parseInt(slot.dataset.frame, 10), candidate: tile.dataset.candidate,
      image: image, large: tile.dataset.large || image, label: tile.dataset.label || ""
    };
  }

  function keyOf(info) { return info ? [info.emoji, info.frame, info.candidate, info.image].join("|") : ""; }

  function typing(el) {
    return !!el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  // --- players -------------------------------------------------------------------------------------------------

  function stateOf(name) {
    if (!players[name]) {
      var still = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
      players[name] = { frames: [], duration: 83, playing: !still, speed: 1, index: 0, timer: null, every: 0 };
    }
    return players[name];
  }

  // The dialog's candidate, else the latest hovered or focused one.
  function swapOf(name) {
    var mine = function (info) { return info && info.emoji === name ? info : null; };
    var hover = mine(sources.hover), focus = mine(sources.focus);
    return mine(sources.shown) || (hover && focus ? (hover.seq > focus.seq ? hover : focus) : hover || focus);
  }

  // The frame indexes the player shows: those with a cut-out, and a swapped-in candidate's.
  function playable(name) {
    var swap = swapOf(name), list = [];
    players[name].frames.forEach(function (src, i) { if (src || (swap && swap.frame === i)) { list.push(i); } });
    if (swap && swap.frame >= players[name].frames.length) { list.push(swap.frame); }
    return list;
  }

  function settle(name) {
    var st = players[name], list = playable(name);
    if (!list.length || list.indexOf(st.index) >= 0) { return; }
    var later = list.filter(function (i) { return i > st.index; });
    st.index = later.length ? later[0] : list[0];
  }

  function neighbour(name, dir) {
    var list = playable(name), at = list.indexOf(players[name].index);
    if (!list.length) { return players[name].index; }
    return list[(Math.max(at, 0) + dir + list.length) % list.length];
  }

  function interval(st) { return Math.max(20, Math.round(st.duration / st.speed)); }

  function sourceAt(name, index) {
    var swap = swapOf(name);
    return swap && swap.frame === index ? swap.image : players[name].frames[index];
  }

  function render(name) {
    var st = players[name];
    if (!st) { return; }
    settle(name);
    var src = sourceAt(name, st.index);
    playerEls(name).forEach(function (el) {
      el.dataset.interval = String(interval(st));
      el.classList.toggle("swapping", !!swapOf(name));
      if (src) {
        el.querySelectorAll("img.anim").forEach(function (img) {
          if (img.getAttribute("src") !== src) { img.src = src; }
          img.dataset.frame = String(st.index);
        });
      }
      renderControls(el, name);
    });
    mirror(name, src);
  }

  // The dialog's and the peek's small "in motion" views show their candidate's player.
  function mirror(name, src) {
    var views = [];
    if (dialog && dialog.open && sources.shown && sources.shown.emoji === name) { views.push(dialog); }
    if (peek && !peek.hidden && peekEmoji === name) { views.push(peek); }
    views.forEach(function (view) {
      var figure = view.querySelector("figure.motion"), img = figure.querySelector("img");
      figure.hidden = !src;
      if (src && img.getAttribute("src") !== src) { img.src = src; }
    });
  }

  function motionFigure(testid) {
    var figure = make("figure", { class: "motion checker", hidden: "" });
    figure.appendChild(make("img", { alt: "in motion", "data-testid": testid }));
    figure.appendChild(make("figcaption", {}, "in motion"));
    return figure;
  }

  function buildControls(box, name) {
    box.textContent = "";
    box.dataset.built = name;
    var control = function (tag, action, text, label, extra) {
      var attrs = { "data-player-action": action, "data-testid": "player-" + action + "-" + name, title: label };
      Object.keys(extra || {}).forEach(function (key) { attrs[key] = extra[key]; });
      if (tag === "button") { attrs.type = "button"; }
      return box.appendChild(make(tag, attrs, text));
    };
    control("button", "prev", "◂", "step back one frame (,)", { "aria-label": "step back" });
    control("button", "toggle", "Pause", "play / pause (p)", { "aria-pressed": "true" });
    control("button", "next", "▸", "step forward one frame (.)", { "aria-label": "step forward" });
    var speed = control("select", "speed", "", "speed", { "aria-label": "speed" });
    SPEEDS.forEach(function (pair) { speed.appendChild(make("option", { value: pair[0] }, pair[1])); });
    box.appendChild(make("span", { class: "player-frame", "data-testid": "player-frame-" + name }));
    box.appendChild(make("span", { class: "player-swap", "data-testid": "player-swap-" + name, hidden: "" }));
  }

  function renderControls(el, name) {
    var box = el.querySelector(".player-controls");
    if (!box) { return; }
    if (box.dataset.built !== name) { buildControls(box, name); }
    var st = players[name], swap = swapOf(name), still = playable(name).length < 2;
    var toggle = box.querySelector("[data-player-action=toggle]");
    toggle.textContent = st.playing ? "Pause" : "Play";
    toggle.setAttribute("aria-pressed", st.playing ? "true" : "false");
    box.querySelectorAll("[data-player-action]").forEach(function (control) { control.disabled = still; });
    box.querySelector("select").value = String(st.speed);
    box.querySelector(".player-frame").textContent =
      st.frames.length ? "frame " + st.index + " / " + st.frames.length : "no frames yet";
    var marker = box.querySelector(".player-swap");
    marker.hidden = !swap;
    marker.textContent = swap ? "showing candidate " + swap.candidate + " at frame " + swap.frame : "";
  }

  // One timer per emoji, running only while the player is playing, has 2 frames or more and is on (or near) the
  // screen or has a candidate swapped in (the peek and the dialog show it in motion): a long page loads and
  // animates only the previews in view.
  function schedule(name) {
    var st = players[name];
    var shown = onScreen[name] || swapOf(name) !== null;
    var every = st.playing && shown && playable(name).length > 1 && playerEls(name).length ? interval(st) : 0;
    if (st.timer !== null && st.every === every) { return; }
    if (st.timer !== null) { clearInterval(st.timer); st.timer = null; }
    st.every = every;
    if (every) { st.timer = setInterval(function () { tick(name); }, every); }
  }

  function tick(name) {
    if (!playerEls(name).length) { schedule(name); return; }
    players[name].index = neighbour(name, 1);
    render(name);
  }

  function update(name) { if (players[name]) { render(name); schedule(name); } }

  function toggle(name) { players[name].playing = !players[name].playing; update(name); }

  function step(name, dir) {
    players[name].playing = false;
    players[name].index = neighbour(name, dir);
    update(name);
  }

  // A paused player jumps to a frame the reviewer is looking at (a hovered candidate's, the current slot's).
  function follow(name, frame) {
    var st = players[name];
    if (st && !st.playing && playable(name).indexOf(frame) >= 0) { st.index = frame; }
  }

  function preload(name) {
    players[name].frames.forEach(function (src) {
      if (src && !preloaded[src]) { preloaded[src] = true; new Image().src = src; }
    });
  }

  function bindPlayer(el) {
    var name = el.dataset.emoji, st = stateOf(name), frames;
    try { frames = JSON.parse(el.dataset.frames || "[]"); } catch (e) { frames = []; }
    st.frames = Array.isArray(frames) ? frames : [];
    st.duration = Math.max(20, parseInt(el.dataset.duration || "83", 10) || 83);
    if (watcher) { watcher.observe(el); } else { onScreen[name] = true; }
    if (onScreen[name]) { preload(name); }
  }

  // --- candidates swapped in -----------------------------------------------------------------------------------

  function setSource(kind, info) {
    var old = sources[kind];
    if (keyOf(old) === keyOf(info)) { return; }
    if (info) { info.seq = ++seq; }
    sources[kind] = info;
    if (info) { follow(info.emoji, info.frame); }
    if (old) { update(old.emoji); }
    if (info && (!old || old.emoji !== info.emoji)) { update(info.emoji); }
  }

  // After a part of the page was replaced: what is hovered or focused now, the dialog's candidate's new image.
  function refreshSources() {
    var hovered = Array.prototype.slice.call(document.querySelectorAll(".slot .candidate:hover")).pop();
    var again = function (old, info) {
      if (info) { info.seq = old && keyOf(old) === keyOf(info) ? old.seq : ++seq; }
      return info;
    };
    sources.hover = again(sources.hover, hovered ? infoOf(hovered.querySelector(TILE)) : null);
    sources.focus = again(sources.focus, infoOf(tileNear(document.activeElement)));
    if (sources.shown) { sources.shown = infoOf(tileOf(sources.shown)) || sources.shown; }
  }

  // --- the peek: a large view beside a hovered candidate -------------------------------------------------------

  function canHover() { return !window.matchMedia || window.matchMedia("(hover: hover)").matches; }

  function ensurePeek() {
    if (peek) { return peek; }
    peek = make("div", { class: "peek checker", "data-testid": "peek", "aria-hidden": "true", hidden: "" });
    peek.appendChild(make("img", { class: "peek-image", alt: "" }));
    var row = peek.appendChild(make("div", { class: "peek-row" }));
    row.appendChild(make("span", { class: "peek-label" }));
    row.appendChild(motionFigure("peek-motion"));
    document.body.appendChild(peek);
    return peek;
  }

  function hidePeek() {
    clearTimeout(peekTimer);
    peekKey = null;
    peekTile = null;
    peekEmoji = null;
    if (peek) { peek.hidden = true; }
  }

  // Scrolling: the peek follows its candidate while the pointer stays on it.
  function onScroll() {
    if (!peek || peek.hidden) { return; }
    var box = peekTile && peekTile.isConnected && (peekTile.closest(".candidate") || peekTile);
    if (box && box.matches(":hover")) { place(peek, box.getBoundingClientRect()); } else { hidePeek(); }
  }

  function schedulePeek(tile) {
    var key = keyOf(infoOf(tile));
    if (!canHover() || key === peekKey) { return; }
    hidePeek();
    peekKey = key;
    peekTile = tile;
    peekTimer = setTimeout(function () { showPeek(tile); }, PEEK_DELAY_MS);
  }

  function showPeek(tile) {
    var info = infoOf(tile);
    if (!info || !tile.isConnected || (dialog && dialog.open)) { return; }
    var box = ensurePeek();
    box.querySelector("img").src = info.large;
    var label = "candidate " + info.candidate + (info.label ? " · " + info.label : "");
    box.querySelector(".peek-label").textContent = label;
    box.hidden = false;
    peekEmoji = info.emoji;
    mirror(info.emoji, players[info.emoji] ? sourceAt(info.emoji, players[info.emoji].index) : null);
    place(box, (tile.closest(".candidate") || tile).getBoundingClientRect());
  }

  // Beside the candidate (right, else left), else below or above it; always inside the viewport.
  function place(box, rect) {
    var gap = 8, w = box.offsetWidth, h = box.offsetHeight;
    var vw = document.documentElement.clientWidth, vh = window.innerHeight;
    var clamp = function (v, low, high) { return Math.max(low, Math.min(v, high)); };
    var left, top;
    if (rect.right + gap + w <= vw - gap) { left = rect.right + gap; }
    else if (rect.left - gap - w >= gap) { left = rect.left - gap - w; }
    if (left !== undefined) {
      top = clamp(rect.top + rect.height / 2 - h / 2, gap, vh - h - gap);
    } else {
      left = clamp(rect.left + rect.width / 2 - w / 2, gap, vw - w - gap);
      var below = rect.bottom + gap + h <= vh - gap || vh - rect.bottom > rect.top;
      top = clamp(below ? rect.bottom + gap : rect.top - gap - h, gap, vh - h - gap);
    }
    box.style.left = Math.round(left) + "px";
    box.style.top = Math.round(top) + "px";
  }

  // --- the enlarged view: a dialog ------------------------------------------------------------------------------

  function ensureDialog() {
    if (dialog) { return dialog; }
    dialog = make("dialog", { class: "enlarged", "data-testid": "enlarged", "aria-labelledby": "enlarged-title" });
    var box = dialog.appendChild(make("div", { class: "enlarged-box" }));
    box.appendChild(make("h3", { id: "enlarged-title", "data-testid": "enlarged-title" }));
    var stage = box.appendChild(make("div", { class: "enlarged-stage checker" }));
    stage.appendChild(make("img", { class: "enlarged-image", "data-testid": "enlarged-image", alt: "" }));
    var row = box.appendChild(make("div", { class: "enlarged-row" }));
    row.appendChild(make("p", { class: "enlarged-label", "data-testid": "enlarged-label" }));
    row.appendChild(motionFigure("enlarged-motion"));
    var actions = box.appendChild(make("div", { class: "enlarged-actions" }));
    var action = function (name, text, label) {
      var attrs = { type: "button", "data-enlarged-action": name, "data-testid": "enlarged-" + name };
      if (label) { attrs["aria-label"] = label; }
      return actions.appendChild(make("button", attrs, text));
    };
    action("prev", "◂", "previous candidate");
    action("next", "▸", "next candidate");
    action("pick", "Pick this one").classList.add("primary");
    action("close", "Close");
    dialog.addEventListener("click", onDialogClick);
    dialog.addEventListener("close", function () { setSource("shown", null); });
    document.body.appendChild(dialog);
    return dialog;
  }

  function slotTiles(info) {
    var slot = info && slotEl(info.emoji, info.frame);
    return slot ? Array.prototype.slice.call(slot.querySelectorAll(TILE)) : [];
  }

  function fillDialog(info) {
    var tile = tileOf(info), tiles = slotTiles(info), at = tiles.indexOf(tile);
    var picked = !!tile && tile.classList.contains("picked");
    var image = dialog.querySelector(".enlarged-image");
    image.src = info.large;
    image.alt = "candidate " + info.candidate + " for " + info.emoji + " frame " + info.frame;
    dialog.querySelector("h3").textContent = info.emoji + " · frame " + info.frame + " · candidate " + info.candidate;
    dialog.querySelector(".enlarged-label").textContent = (info.label || "") + (picked ? " · picked now" : "");
    dialog.querySelector("[data-enlarged-action=pick]").disabled = !tile || tile.disabled || picked;
    dialog.querySelector("[data-enlarged-action=prev]").disabled = at <= 0;
    dialog.querySelector("[data-enlarged-action=next]").disabled = at < 0 || at >= tiles.length - 1;
  }

  function openDialog(info) {
    if (!info) { return; }
    ensureDialog();
    hidePeek();
    setSource("shown", info);
    fillDialog(info);
    if (!dialog.open) { dialog.showModal(); }
    dialog.querySelector("figure.motion").hidden = true;
    render(info.emoji);
    var pick = dialog.querySelector("[data-enlarged-action=pick]");
    (pick.disabled ? dialog.querySelector("[data-enlarged-action=close]") : pick).focus();
  }

  function browse(dir) {
    var tiles = slotTiles(sources.shown), next = tiles[tiles.indexOf(tileOf(sources.shown)) + dir];
    if (next) { openDialog(infoOf(next)); }
  }

  function pickShown() {
    var tile = tileOf(sources.shown);
    if (!tile || tile.disabled) { return; }
    dialog.close();
    tile.click();
  }

  function onDialogClick(e) {
    if (e.target === dialog) { dialog.close(); return; }  // the backdrop
    var button = e.target instanceof Element && e.target.closest("[data-enlarged-action]");
    if (!button) { return; }
    var act = button.dataset.enlargedAction;
    if (act === "close") { dialog.close(); }
    else if (act === "pick") { pickShown(); }
    else { browse(act === "next" ? 1 : -1); }
  }

  // --- the current slot and keys -------------------------------------------------------------------------------

  function currentSlot() { return current ? slotEl(current.emoji, current.frame) : null; }

  function markCurrent() {
    var slot = currentSlot();
    document.querySelectorAll(".slot.current").forEach(function (el) {
      if (el !== slot) { el.classList.remove("current"); el.removeAttribute("aria-current"); }
    });
    if (slot) { slot.classList.add("current"); slot.setAttribute("aria-current", "true"); }
  }

  function selectSlot(slot) {
    current = { emoji: slot.dataset.emoji, frame: parseInt(slot.dataset.frame, 10) };
    markCurrent();
    for (var d = slot.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
    slot.focus({ preventScroll: true });
    slot.scrollIntoView({ block: "nearest" });
    follow(current.emoji, current.frame);
    update(current.emoji);
  }

  function moveSlot(dir) {
    var slots = Array.prototype.slice.call(document.querySelectorAll(".slot[data-emoji][data-frame]"));
    if (!slots.length) { return; }
    var at = slots.indexOf(currentSlot());
    if (at < 0) {  // none yet: the first one not above the viewport
      var shown = slots.filter(function (s) { return s.getBoundingClientRect().bottom > 0; });
      selectSlot(shown[0] || slots[slots.length - 1]);
      return;
    }
    selectSlot(slots[Math.max(0, Math.min(slots.length - 1, at + dir))]);
  }

  function pickNth(n) {
    var slot = currentSlot(), tile = slot && slot.querySelectorAll(TILE)[n - 1];
    if (tile && !tile.disabled) { tile.click(); }
  }

  function enlargeCurrent() {
    var slot = currentSlot();
    var tile = slot && (slot.querySelector(TILE + ".picked") || slot.querySelector(TILE));
    if (tile) { openDialog(infoOf(tile)); }
  }

  function keyPlayer() {
    if (current && players[current.emoji] && playerEls(current.emoji).length) { return current.emoji; }
    var first = document.querySelector(".player[data-emoji]");
    return first && players[first.dataset.emoji] ? first.dataset.emoji : null;
  }

  function withPlayer(fn) { return function () { var name = keyPlayer(); if (name) { fn(name); } }; }

  function approve() {
    var button = document.querySelector("[data-testid=approve-submit]");
    if (button && !button.disabled) { button.click(); }
  }

  function keyAction(e) {
    var key = e.key;
    if (key === "?") { return help ? toggleHelp : null; }
    if (e.shiftKey) { return key === "A" ? approve : null; }
    if (key === "Escape") { return help && !help.hidden ? toggleHelp : null; }
    if (/^[1-9]$/.test(key)) { return function () { pickNth(parseInt(key, 10)); }; }
    return {
      j: function () { moveSlot(1); },
      k: function () { moveSlot(-1); },
      e: enlargeCurrent,
      p: withPlayer(toggle),
      ",": withPlayer(function (name) { step(name, -1); }),
      ".": withPlayer(function (name) { step(name, 1); })
    }[key] || null;
  }

  function onKey(e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) { return; }
    if (dialog && dialog.open) {
      if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
        e.preventDefault();
        browse(e.key === "ArrowRight" ? 1 : -1);
      }
      return;
    }
    if (typing(e.target)) { return; }
    var act = keyAction(e);
    if (!act) { return; }
    e.preventDefault();
    hidePeek();
    act();
  }

  // --- the shortcuts' help ---------------------------------------------------------------------------------------

  function ensureHelp() {
    if (helpToggle && helpToggle.isConnected) { return; }
    if (!document.querySelector(".player[data-emoji], .slot[data-emoji]")) { return; }
    var host = document.querySelector("main") || document.body;
    helpToggle = make("button", {
      type: "button", class: "shortcuts-toggle", "data-testid": "shortcuts-toggle", "data-shortcuts-toggle": "",
      "aria-expanded": "false", "aria-controls": "shortcuts-help", title: "keyboard shortcuts (?)"
    }, "Keys ?");
    help = make("aside", {
      id: "shortcuts-help", class: "shortcuts-help", "data-testid": "shortcuts-help",
      "aria-label": "keyboard shortcuts", hidden: ""
    });
    help.appendChild(make("h2", {}, "Keyboard shortcuts"));
    var list = help.appendChild(make("dl"));
    SHORTCUTS.forEach(function (pair) {
      list.appendChild(make("dt", {}, pair[0]));
      list.appendChild(make("dd", {}, pair[1]));
    });
    var close = { type: "button", "data-shortcuts-toggle": "", "data-testid": "shortcuts-close" };
    help.appendChild(make("button", close, "Close"));
    host.appendChild(helpToggle);
    host.appendChild(help);
  }

  function toggleHelp() {
    if (!help) { return; }
    help.hidden = !help.hidden;
    helpToggle.setAttribute("aria-expanded", help.hidden ? "false" : "true");
  }

  // --- events, all delegated on document: the page's parts come and go -----------------------------------------

  function onClick(e) {
    var target = e.target instanceof Element ? e.target : null;
    if (!target) { return; }
    var control = target.closest("button[data-player-action]");
    var player = control && control.closest(".player[data-emoji]");
    if (player && players[player.dataset.emoji]) {
      var name = player.dataset.emoji, act = control.dataset.playerAction;
      if (act === "toggle") { toggle(name); } else { step(name, act === "next" ? 1 : -1); }
      return;
    }
    var enlarge = target.closest(".slot .enlarge");
    if (enlarge) { e.preventDefault(); openDialog(infoOf(tileNear(enlarge))); return; }
    if (target.closest("[data-shortcuts-toggle]")) { toggleHelp(); }
  }

  function onChange(e) {
    var select = e.target instanceof Element && e.target.closest("select[data-player-action=speed]");
    var player = select && select.closest(".player[data-emoji]");
    if (!player || !players[player.dataset.emoji]) { return; }
    players[player.dataset.emoji].speed = parseFloat(select.value) || 1;
    update(player.dataset.emoji);
  }

  function onOver(e) {
    var tile = tileNear(e.target);
    setSource("hover", infoOf(tile));
    if (tile) { schedulePeek(tile); } else { hidePeek(); }
  }

  function onOut(e) {
    if (!e.relatedTarget) { setSource("hover", null); hidePeek(); }
  }

  function startPreviews(root) {
    all(root || document, ".player[data-emoji]").forEach(bindPlayer);
    refreshSources();
    markCurrent();
    ensureHelp();
    Object.keys(players).forEach(update);
  }

  document.addEventListener("click", onClick);
  document.addEventListener("change", onChange);
  document.addEventListener("mouseover", onOver);
  document.addEventListener("mouseout", onOut);
  document.addEventListener("focusin", function (e) { setSource("focus", infoOf(tileNear(e.target))); });
  document.addEventListener("focusout", function (e) { if (!e.relatedTarget) { setSource("focus", null); } });
  document.addEventListener("keydown", onKey);
  window.addEventListener("scroll", onScroll, { passive: true });

  window.popconReview = { startPreviews: startPreviews };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { startPreviews(document); });
  } else {
    startPreviews(document);
  }
})();
