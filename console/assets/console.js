// lock console: the admin token box and the action buttons. The token stays in this tab's
// sessionStorage and goes out only in the Authorization header of the console's own requests.
(function () {
  "use strict";
  var KEY = "lockConsoleToken";
  var status = document.getElementById("status");
  var box = document.getElementById("token");
  if (box) {
    box.value = sessionStorage.getItem(KEY) || "";
    box.addEventListener("input", function () {
      sessionStorage.setItem(KEY, box.value);
    });
  }
  function say(text, bad) {
    if (!status) return;
    status.textContent = text;
    status.className = bad ? "bad" : "ok";
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-url]");
    if (!button) return;
    var question = button.getAttribute("data-confirm");
    if (question && !window.confirm(question)) return;
    var token = sessionStorage.getItem(KEY) || "";
    if (!token) {
      say("Enter the admin token first (top right).", true);
      if (box) box.focus();
      return;
    }
    button.disabled = true;
    fetch(button.getAttribute("data-url"), {
      method: button.getAttribute("data-method"),
      headers: { Authorization: "Bearer " + token },
      credentials: "same-origin",
    })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) {
            throw new Error((body.error && body.error.message) || response.statusText);
          }
          return body;
        });
      })
      .then(function (body) {
        say(button.textContent + ": done " + JSON.stringify(body), false);
        document.body.setAttribute("data-last-action", "ok");
        setTimeout(function () { window.location.reload(); }, 600);
      })
      .catch(function (error) {
        say(button.textContent + " failed: " + error.message, true);
        document.body.setAttribute("data-last-action", "failed");
        button.disabled = false;
      });
  });
})();
