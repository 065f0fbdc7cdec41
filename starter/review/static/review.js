// popcon review: what every page shares. Animated previews: an <img class="anim" data-frames='[...]'
// data-duration="ms"> cycles through the current picks' cut-outs.
(function () {
  "use strict";
  var timers = [];

  function startPreviews(root) {
    timers.forEach(clearInterval);
    timers = [];
    (root || document).querySelectorAll("img.anim").forEach(function (img) {
      var frames;
      try { frames = JSON.parse(img.dataset.frames || "[]"); } catch (e) { frames = []; }
      if (frames.length < 2) { return; }
      frames.forEach(function (src) { var preload = new Image(); preload.src = src; });
      var i = 0;
      var ms = Math.max(20, parseInt(img.dataset.duration || "83", 10));
      timers.push(setInterval(function () {
        i = (i + 1) % frames.length;
        img.src = frames[i];
        img.dataset.frame = String(i);
      }, ms));
    });
  }

  window.popconReview = { startPreviews: startPreviews };
  document.addEventListener("DOMContentLoaded", function () { startPreviews(document); });
})();
