// The start form: choose and order the actions, add custom actions; a chosen picture turns the character's review
// off (an uploaded picture is the character as it is).
(function () {
  "use strict";
  var list = document.getElementById("action-list");
  var template = document.getElementById("action-item-template");
  var select = document.getElementById("preset-select");

  function names() {
    return Array.prototype.map.call(list.querySelectorAll("li"), function (li) { return li.dataset.action; });
  }

  function add(name, hint) {
    if (names().indexOf(name) >= 0) { return; }
    var li = template.content.firstElementChild.cloneNode(true);
    li.dataset.action = name;
    li.dataset.testid = "action-item-" + name;
    li.setAttribute("data-testid", "action-item-" + name);
    li.querySelector("input").value = name;
    li.querySelector(".name").textContent = name;
    li.querySelector(".hint").textContent = hint || "";
    li.querySelector(".action-up").setAttribute("data-testid", "action-up-" + name);
    li.querySelector(".action-down").setAttribute("data-testid", "action-down-" + name);
    li.querySelector(".action-remove").setAttribute("data-testid", "action-remove-" + name);
    list.appendChild(li);
  }

  document.getElementById("add-preset").addEventListener("click", function () {
    var option = select.options[select.selectedIndex];
    if (option) { add(option.value, option.dataset.hint); }
  });

  list.addEventListener("click", function (event) {
    var button = event.target.closest("button");
    if (!button) { return; }
    var li = button.closest("li");
    if (button.classList.contains("action-remove")) { li.remove(); }
    else if (button.classList.contains("action-up") && li.previousElementSibling) { list.insertBefore(li, li.previousElementSibling); }
    else if (button.classList.contains("action-down") && li.nextElementSibling) { list.insertBefore(li.nextElementSibling, li); }
  });

  var customs = document.getElementById("custom-actions");
  document.getElementById("add-custom").addEventListener("click", function () {
    var rows = customs.querySelectorAll(".custom-row");
    var row = rows[rows.length - 1].cloneNode(true);
    var index = rows.length;
    row.setAttribute("data-testid", "custom-row-" + index);
    row.querySelectorAll("input").forEach(function (input) {
      input.value = "";
      var part = input.name.replace("custom_", "");
      input.setAttribute("data-testid", "custom-" + part + "-" + index);
      if (input.id) { input.id = "field-custom-" + index; }
    });
    var error = row.querySelector(".error");
    if (error) {
      error.textContent = "";
      error.id = "error-custom-" + index;
      error.setAttribute("data-testid", "error-custom-" + index);
    }
    customs.appendChild(row);
  });

  var file = document.getElementById("field-character_file");
  var review = document.getElementById("field-review_character");
  var note = document.getElementById("character-review-note");
  var chosen = review.value;
  function picture() {
    var uploading = file.files.length > 0;
    if (uploading && !review.disabled) { chosen = review.value; }
    review.value = uploading ? "auto" : chosen;
    review.disabled = uploading;
    note.hidden = !uploading;
  }
  file.addEventListener("change", picture);
  picture();
})();
