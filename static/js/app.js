// Behaviour the templates used to put in inline event handlers, which the
// Content-Security-Policy forbids: a <select data-autosubmit> submits its form on change.
document.addEventListener("change", function (event) {
  var target = event.target;
  if (target instanceof HTMLSelectElement && target.hasAttribute("data-autosubmit") && target.form) {
    target.form.submit();
  }
});
