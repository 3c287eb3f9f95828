// lock console: the admin token box, the action buttons and the background updates.
//
// The token stays in this tab's sessionStorage and goes out only in the Authorization header
// of the console's own requests. Every few seconds the script fetches the page it is on and
// swaps in the new <main> (the server escapes every value; nothing here builds markup from
// data: messages are set with textContent). A full-page refresh would wipe what an operator
// is typing or selecting, so updates wait while an input has the focus or text is selected,
// and what was typed into a field (a filter not yet applied) is carried into the new page; a
// failed read keeps the last data on screen under a "stale since" banner instead of replacing
// it with an error. An action that asks first asks in the page's own dialog, and sends nothing
// until it is confirmed; "Run now" sends a new Idempotency-Key per press, so a press sent twice
// runs the job once.
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

  // Text selected in the page (to copy an error, a token), which a swap would clear.
  function selecting() {
    var selection = window.getSelection ? window.getSelection() : null;
    return !!selection && !selection.isCollapsed && String(selection).length > 0;
  }

  // True while the operator is in the middle of something an update would disturb.
  function busy() {
    var active = document.activeElement;
    var tag = active ? active.tagName : "";
    return acting || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || selecting();
  }

  // A field's identity across two renderings of the page: its form's id (or action) and its
  // name (or id).
  function fieldKey(field) {
    var form = field.form;
    var owner = form ? form.id || form.getAttribute("action") || "form" : "";
    return owner + "|" + (field.name || field.id);
  }

  // What the operator typed or chose that the page did not render (a filter not yet applied).
  function edits(root) {
    var found = {};
    root.querySelectorAll("input, select, textarea").forEach(function (field) {
      if (!field.name && !field.id) return;
      var changed = field.type === "checkbox" || field.type === "radio"
        ? field.checked !== field.defaultChecked
        : field.tagName === "SELECT"
          ? Array.prototype.some.call(field.options, function (o) { return o.selected !== o.defaultSelected; })
          : field.value !== field.defaultValue;
      if (changed) found[fieldKey(field)] = field.type === "checkbox" || field.type === "radio" ? field.checked : field.value;
    });
    return found;
  }

  function restore(root, saved) {
    root.querySelectorAll("input, select, textarea").forEach(function (field) {
      var key = fieldKey(field);
      if (!Object.prototype.hasOwnProperty.call(saved, key)) return;
      if (field.type === "checkbox" || field.type === "radio") field.checked = saved[key];
      else field.value = saved[key];
    });
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
        note.textContent = selecting()
          ? " · updates held while text is selected (click elsewhere to resume)"
          : " · updates held while you type (leave the field to resume)";
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
          var current = document.querySelector("main");
          var typed = edits(current);
          var adopted = document.adoptNode(main);
          restore(adopted, typed);
          current.replaceWith(adopted);
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
            (answer.replayed ? ", sent again: nothing more asked" : "") +
            "): one live replica of " + answer.group + " runs it once; the run appears on ",
          page,
          ".",
        ];
      case "unlock":
        return [answer.released ? "Released " + name + "; its holder is not told and may still write." : name + " was no longer held; nothing released."];
      case "retry":
        if (answer.via === "run_now") {
          return ["Retry of " + name + " requested as a run-now (request " + answer.run_request.request +
            "): one live replica runs it once; the run appears on ", page, "."];
        }
        return ["Retry of " + name + "'s slot " + when(answer.slot) + " queued: a live replica of " + answer.group +
          " runs it once, as a backfill; the run appears on ", page, "."];
      case "backfill":
        var refused = answer.refused.length
          ? " " + answer.refused.length + " slot(s) already ran and were left out (tick the box to run them too)."
          : "";
        return ["Backfill of " + name + ": " + answer.queued.length + " slot(s) queued, each runs once on a live replica of " +
          answer.group + "." + refused + " The runs appear on ", page, "."];
      default:
        return [button.textContent + ": done."];
    }
  }

  // Asks `question` in the page's dialog; calls `then` only if it is confirmed.
  function ask(question, then) {
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") {
      if (window.confirm(question)) then();
      return;
    }
    document.getElementById("confirm-question").textContent = question;
    var yes = dialog.querySelector("button.confirm");
    var no = dialog.querySelector("button.cancel");
    function close(confirmed) {
      yes.removeEventListener("click", onYes);
      no.removeEventListener("click", onNo);
      dialog.removeEventListener("cancel", onNo);
      dialog.close(confirmed ? "confirm" : "cancel");
      body.removeAttribute("data-asking");
      acting = false;
      if (confirmed) then();
      else schedule(every);
    }
    function onYes() { close(true); }
    function onNo(event) { if (event) event.preventDefault(); close(false); }
    yes.addEventListener("click", onYes);
    no.addEventListener("click", onNo);
    dialog.addEventListener("cancel", onNo);
    // No update swaps the page under the question.
    acting = true;
    body.setAttribute("data-asking", "yes");
    dialog.showModal();
    no.focus();
  }

  // The URL a button sends to: its own, with the fields of its form (if it names one).
  function target(button) {
    var url = button.getAttribute("data-url");
    var formId = button.getAttribute("data-form");
    var form = formId ? document.getElementById(formId) : null;
    if (!form) return url;
    var query = [];
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name || field.disabled) return;
      if ((field.type === "checkbox" || field.type === "radio") && !field.checked) return;
      query.push(encodeURIComponent(field.name) + "=" + encodeURIComponent(field.value));
    });
    return url + (url.indexOf("?") < 0 ? "?" : "&") + query.join("&");
  }

  // A new random key per press (crypto.randomUUID needs a secure context; this does not).
  function newKey() {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return (b + 256).toString(16).slice(1); }).join("");
  }

  function send(button, token) {
    button.disabled = true;
    acting = true;
    var headers = { Authorization: "Bearer " + token };
    if (button.getAttribute("data-idempotent") === "yes") headers["Idempotency-Key"] = newKey();
    fetch(target(button), {
      method: button.getAttribute("data-method"),
      headers: headers,
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
        say([button.textContent.replace("…", "") + " " + (button.getAttribute("data-name") || "") + " failed: " + error.message], true);
        body.setAttribute("data-last-action", "failed");
        button.disabled = false;
      })
      .then(function () {
        acting = false;
        // Show the action's effect now rather than at the next tick.
        schedule(0);
      });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-url]");
    if (!button) return;
    var token = sessionStorage.getItem(KEY) || "";
    if (!token) {
      say(["Enter the admin token first (top right)."], true);
      if (box) box.focus();
      return;
    }
    var form = button.getAttribute("data-form") ? document.getElementById(button.getAttribute("data-form")) : null;
    if (form && typeof form.reportValidity === "function" && !form.reportValidity()) return;
    var question = button.getAttribute("data-confirm");
    if (question) ask(question, function () { send(button, token); });
    else send(button, token);
  });

  schedule(every);
})();
