// Findings list: the header checkbox ticks every row of this page (CSP forbids inline handlers).
document.addEventListener("change", function (event) {
  var target = event.target;
  if (!(target instanceof HTMLInputElement)) return;
  if (target.id === "select-page") {
    document.querySelectorAll("input.row-select").forEach(function (box) {
      box.checked = target.checked;
    });
  }
});
