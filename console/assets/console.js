// lock console: the admin token box, the action buttons and the background updates.
//
// The token stays in this tab's sessionStorage and goes out only in the Authorization header
// of the console's own requests. Every few seconds the script fetches the page it is on and
// swaps in the new <main> (the server escapes every value; nothing here builds markup from
// data: messages are set with textContent). A full-page refresh would wipe what an operator
// is typing, so updates wait while an input has the focus; a failed read keeps the last data
// on screen under a "stale since" banner instead of replacing it with an error.
(function () {
  "use strict";
  var KEY = "lockConsoleToken";
  var READ_LIMIT_MS = 10000;
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh-ms"), 10) || 5000;
  var status = document.getElementById("status");
  var stale = document.getElementById("stale");
  var box = document.getElementById("token");
  var acting = false;
  var timer = null;
  var updates = 0;
  if (box) {
    box.value = sessionStorage.getItem(KEY) || "";
    box.addEventListener("input", function () {
      sessionStorage.setItem(KEY, box.value);
    });
  }

  function clock(date) {
    return date.toISOString().slice(11, 19) + " UTC";
  }

  // An RFC 3339 instant from the API as the page's clock shows times; as given if unreadable.
  function when(text) {
    var date = new Date(text);
    return isNaN(date.getTime()) ? String(text) : clock(date);
  }

  // True while the operator is in the middle of something an update would disturb.
  function busy() {
    var active = document.activeElement;
    var tag = active ? active.tagName : "";
    return acting || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
  }

  // Feedback that stays until dismissed or replaced by the next action's.
  function say(parts, bad) {
    if (!status) return;
    status.textContent = "";
    status.className = bad ? "bad" : "ok";
    parts.forEach(function (part) {
      if (typeof part === "string") {
        status.appendChild(document.createTextNode(part));
      } else {
        var link = document.createElement("a");
        link.href = part.href;
        link.textContent = part.text;
        status.appendChild(link);
      }
    });
    var close = document.createElement("button");
    close.type = "button";
    close.className = "dismiss";
    close.setAttribute("aria-label", "dismiss");
    close.textContent = "×";
    close.addEventListener("click", function () {
      status.textContent = "";
      status.className = "";
    });
    status.appendChild(close);
  }

  function showStale(reason) {
    if (!stale) return;
    var readAt = document.getElementById("read-at");
    stale.textContent =
      "Stale since " + (readAt ? readAt.textContent : "the last update") +
      ": the console could not read (" + reason + "), so this is the last data it had. " +
      "Retrying every " + Math.round(every / 1000) + " s; last try " + clock(new Date()) + ".";
    stale.hidden = false;
    body.setAttribute("data-stale", "yes");
  }

  function schedule(delay) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(update, delay);
  }

  function update() {
    timer = null;
    if (busy()) {
      // Say why the data stops moving; the next update's footer replaces the note.
      var footer = document.querySelector("footer");
      if (footer && !acting && !document.getElementById("held")) {
        var note = document.createElement("span");
        note.id = "held";
        note.textContent = " · updates held while you type (leave the field to resume)";
        footer.appendChild(note);
      }
      schedule(every);
      return;
    }
    // A read Redis never answers (a frozen server) must not leave the page looking current:
    // past the limit it counts as failed and the stale banner says so.
    var abort = window.AbortController ? new AbortController() : null;
    var limit = abort ? setTimeout(function () { abort.abort(); }, READ_LIMIT_MS) : null;
    fetch(window.location.href, {
      headers: { Accept: "text/html" },
      credentials: "same-origin",
      cache: "no-store",
      signal: abort ? abort.signal : undefined,
    })
      .then(function (response) {
        return response.text().then(function (text) {
          var doc = new DOMParser().parseFromString(text, "text/html");
          // 404 and 400 are answers about this page (the lock was released, say) and are
          // shown; anything else means the console could not read, and the last data stays.
          if (!response.ok && response.status !== 404 && response.status !== 400) {
            var error = doc.querySelector("main .error");
            throw new Error(response.status + (error ? ": " + error.textContent : ""));
          }
          var main = doc.querySelector("main");
          if (!main) throw new Error("the answer was not a console page");
          // Typed into a field while the read was under way: keep it, try again later.
          if (busy()) return;
          document.querySelector("main").replaceWith(document.adoptNode(main));
          var footer = doc.querySelector("footer");
          if (footer) document.querySelector("footer").replaceWith(document.adoptNode(footer));
          if (stale) stale.hidden = true;
          body.removeAttribute("data-stale");
          updates += 1;
          body.setAttribute("data-updates", String(updates));
        });
      })
      .catch(function (error) {
        var timedOut = error && error.name === "AbortError";
        showStale(timedOut ? "no answer within " + READ_LIMIT_MS / 1000 + " s" : error.message || "no answer");
      })
      .then(function () {
        if (limit) clearTimeout(limit);
        schedule(every);
      });
  }

  // The sentence an action's answer deserves, as text and links.
  function sentence(button, answer) {
    var action = button.getAttribute("data-action");
    var name = button.getAttribute("data-name") || "";
    var root = body.getAttribute("data-root") || "/";
    var page = { href: root + "jobs/" + encodeURIComponent(name), text: "its page" };
    switch (action) {
      case "pause":
        return ["Paused " + name + " (by " + answer.by + "): every replica skips its runs until it is resumed."];
      case "resume":
        return [answer.was_paused ? "Resumed " + name + ": its next slot runs as scheduled." : name + " was not paused; nothing changed."];
      case "run":
        return [
          "Run-now of " + name + " requested at " + when(answer.requested_at) + " (request " + answer.request +
            "): one live replica of " + answer.group + " runs it once; the run appears on ",
          page,
          ".",
        ];
      case "unlock":
        return [answer.released ? "Released " + name + "; its holder is not told and may still write." : name + " was no longer held; nothing released."];
      default:
        return [button.textContent + ": done."];
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-url]");
    if (!button) return;
    var question = button.getAttribute("data-confirm");
    if (question && !window.confirm(question)) return;
    var token = sessionStorage.getItem(KEY) || "";
    if (!token) {
      say(["Enter the admin token first (top right)."], true);
      if (box) box.focus();
      return;
    }
    button.disabled = true;
    acting = true;
    fetch(button.getAttribute("data-url"), {
      method: button.getAttribute("data-method"),
      headers: { Authorization: "Bearer " + token },
      credentials: "same-origin",
    })
      .then(function (response) {
        return response.json().then(function (answer) {
          if (!response.ok) {
            throw new Error((answer.error && answer.error.message) || response.statusText);
          }
          return answer;
        });
      })
      .then(function (answer) {
        say(sentence(button, answer), false);
        body.setAttribute("data-last-action", "ok");
      })
      .catch(function (error) {
        say([button.textContent + " " + (button.getAttribute("data-name") || "") + " failed: " + error.message], true);
        body.setAttribute("data-last-action", "failed");
        button.disabled = false;
      })
      .then(function () {
        acting = false;
        // Show the action's effect now rather than at the next tick.
        schedule(0);
      });
  });

  schedule(every);
})();
