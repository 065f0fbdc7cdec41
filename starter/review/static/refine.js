// The refine page: a frame's matte (on a checkerboard) beside its source, synchronised crosshairs, points.
// A tap or click adds a point of the chosen kind (foreground: on the region; background: beside it); shift+click or
// right click always adds a background point. Pointer events, so a touch screen works too. Apply posts the points
// with the mode (erase / restore) and "following"; undo takes the candidate's last refinement back; arrows change
// frame.
(function () {
  "use strict";
  var root = document.getElementById("refine");
  if (!root) { return; }
  var width = parseInt(root.dataset.width, 10), height = parseInt(root.dataset.height, 10);
  var matteCanvas = document.getElementById("refine-canvas-matte");
  var sourceCanvas = document.getElementById("refine-canvas-source");
  var canvases = [matteCanvas, sourceCanvas];
  var images = { matte: new Image(), source: new Image() };
  var points = [];
  var cursor = null;
  var mode = "erase";
  var foreground = true;  // what a plain tap or click adds

  function status(text) { document.getElementById("refine-status").textContent = text; }
  function error(text) { document.getElementById("error-refine").textContent = text || ""; }

  function draw() {
    canvases.forEach(function (canvas) {
      var ctx = canvas.getContext("2d");
      ctx.clearRect(0, 0, width, height);
      var image = canvas === matteCanvas ? images.matte : images.source;
      if (image.complete && image.naturalWidth) { ctx.drawImage(image, 0, 0, width, height); }
      // Sizes in screen pixels: the canvas is drawn at the frame's own size and shown scaled.
      var scale = (canvas.getBoundingClientRect().width / width) || 1;
      var r = 5 / scale;
      points.forEach(function (p) {
        ctx.beginPath();
        ctx.arc(p.x + 0.5, p.y + 0.5, r, 0, 2 * Math.PI);
        ctx.fillStyle = p.foreground ? "rgba(20, 180, 60, .9)" : "rgba(220, 30, 30, .9)";
        ctx.fill();
        ctx.lineWidth = 1.5 / scale;
        ctx.strokeStyle = "#fff";
        ctx.stroke();
      });
      if (cursor) {
        ctx.strokeStyle = "rgba(47, 111, 236, .9)";
        ctx.lineWidth = 1 / scale;
        ctx.beginPath();
        ctx.moveTo(0, cursor.y + 0.5); ctx.lineTo(width, cursor.y + 0.5);
        ctx.moveTo(cursor.x + 0.5, 0); ctx.lineTo(cursor.x + 0.5, height);
        ctx.stroke();
      }
    });
    var fg = points.filter(function (p) { return p.foreground; }).length;
    document.getElementById("refine-points").textContent = points.length
      ? fg + " foreground, " + (points.length - fg) + " background point(s)" : "no points";
    root.dataset.points = String(points.length);
  }

  function at(event) {
    var box = event.target.getBoundingClientRect();
    var x = Math.floor((event.clientX - box.left) * width / box.width);
    var y = Math.floor((event.clientY - box.top) * height / box.height);
    return { x: Math.min(width - 1, Math.max(0, x)), y: Math.min(height - 1, Math.max(0, y)) };
  }

  canvases.forEach(function (canvas) {
    canvas.addEventListener("pointermove", function (event) { cursor = at(event); draw(); });
    canvas.addEventListener("pointerleave", function () { cursor = null; draw(); });
    canvas.addEventListener("contextmenu", function (event) { event.preventDefault(); });
    canvas.addEventListener("pointerdown", function (event) {
      if (event.button !== 0 && event.button !== 2) { return; }
      event.preventDefault();
      var point = at(event);
      point.foreground = foreground && event.button === 0 && !event.shiftKey;
      points.push(point);
      error("");
      draw();
    });
  });

  function pressed(id, on) { document.getElementById(id).setAttribute("aria-pressed", String(on)); }
  function setKind(next) {
    foreground = next;
    pressed("refine-point-keep", foreground);
    pressed("refine-point-remove", !foreground);
  }
  function setMode(next) {
    mode = next;
    pressed("refine-erase", mode === "erase");
    pressed("refine-restore", mode === "restore");
  }
  document.getElementById("refine-point-keep").addEventListener("click", function () { setKind(true); });
  document.getElementById("refine-point-remove").addEventListener("click", function () { setKind(false); });
  document.getElementById("refine-erase").addEventListener("click", function () { setMode("erase"); });
  document.getElementById("refine-restore").addEventListener("click", function () { setMode("restore"); });
  document.getElementById("refine-reset").addEventListener("click", function () { points = []; error(""); draw(); });

  function post(url, body) {
    error("");
    status("working…");
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body || {})
    }).then(function (response) {
      return response.json().then(function (data) {
        if (!response.ok) { throw new Error(data.error || ("HTTP " + response.status)); }
        return data;
      });
    }).then(function (data) {
      status(data.message || "done");
      if (data.matte_url) { load("matte", data.matte_url); }
      if (data.versions) {
        var label = document.getElementById("refine-version");
        label.textContent = "version " + data.versions;
        label.dataset.version = String(data.versions);
      }
      if (data.version_urls) { showVersions(data.version_urls); }
      return data;
    }).catch(function (err) { status(""); error(err.message); throw err; });
  }

  document.getElementById("refine-apply").addEventListener("click", function () {
    if (!points.length) { error("add at least one point first"); return; }
    post(root.dataset.apply, {
      points: points,
      mode: mode,
      following: document.getElementById("refine-following").checked
    }).then(function () { points = []; draw(); }, function () {});
  });
  document.getElementById("refine-undo").addEventListener("click", function () {
    post(root.dataset.undo, {}).then(function () {}, function () {});
  });

  document.addEventListener("keydown", function (event) {
    if (event.target && (event.target.tagName === "INPUT" || event.target.tagName === "TEXTAREA")) { return; }
    if (event.key === "ArrowLeft" && root.dataset.prev) { window.location.href = root.dataset.prev; }
    if (event.key === "ArrowRight" && root.dataset.next) { window.location.href = root.dataset.next; }
  });

  function showVersions(urls) {
    var list = document.getElementById("refine-versions");
    if (!list) { return; }
    list.textContent = "";
    urls.forEach(function (url, i) {
      var link = document.createElement("a");
      link.href = url;
      link.target = "_blank";
      link.rel = "noopener";
      link.className = "checker" + (i === urls.length - 1 ? " current" : "");
      link.setAttribute("data-testid", "refine-version-" + (i + 1));
      var thumb = document.createElement("img");
      thumb.src = url;
      thumb.alt = "version " + (i + 1);
      var number = document.createElement("span");
      number.textContent = String(i + 1);
      link.appendChild(thumb);
      link.appendChild(number);
      list.appendChild(link);
    });
  }

  function load(which, url) {
    var image = new Image();
    image.onload = function () {
      images[which] = image;
      root.dataset[which + "Shown"] = url;  // data-matte-shown / data-source-shown: what the canvas draws
      draw();
    };
    image.src = url;
  }
  load("source", root.dataset.source);
  load("matte", root.dataset.matte);
  draw();
})();
