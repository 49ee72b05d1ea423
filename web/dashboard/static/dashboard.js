// agentcron dashboard: local times, the form's kind switches and live preview, live run
// history, confirmations. Plain JavaScript, no build step; the pages work without it.
"use strict";

// Every <time datetime="...Z" data-zone="..."> gets the viewer's local time beside the
// schedule's zone, unless the two zones are the same.
const viewerZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
// The offset as a number ("longOffset": "GMT+01:00"), never an abbreviation: "CST" is both
// China's and the US's, and en-US writes most zones as "GMT+1" anyway.
const localFormat = new Intl.DateTimeFormat("en-US", {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hourCycle: "h23", timeZoneName: "longOffset",
});

// "2026-11-29 23:02:42 +01:00": the layout of the server's own times, so the two compare.
function formatLocal(moment) {
  const part = {};
  for (const { type, value } of localFormat.formatToParts(moment)) part[type] = value;
  const offset = part.timeZoneName === "GMT" ? "UTC" : part.timeZoneName.replace(/^GMT/, "");
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${offset}`;
}

// Text nodes of `text` with a line break allowed after each "/" (a <wbr>), as the server's
// `breakable` filter writes them: America/Argentina/Buenos_Aires wraps at its slashes.
function breakable(text) {
  const nodes = [];
  const parts = text.split("/");
  parts.forEach((part, index) => {
    if (index === parts.length - 1) nodes.push(part);
    else nodes.push(part + "/", document.createElement("wbr"));
  });
  return nodes;
}

function localizeTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]")) {
    if (el.dataset.localized || el.dataset.zone === viewerZone || el.dataset.local === "no") continue;
    const moment = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime())) continue;
    // The time itself never breaks; the words after it may go to a line of their own, so a
    // narrow column or a phone shows it whole instead of clipping it.
    const stamp = document.createElement("span");
    stamp.className = "stamp";
    stamp.textContent = formatLocal(moment);
    const local = document.createElement("span");
    local.className = "viewer-time";
    local.append(stamp, " your time (", ...breakable(viewerZone), ")");
    local.title = viewerZone;
    el.after(local);
    el.dataset.localized = "1";
  }
}

// Show only the inputs of the chosen trigger kind and runner kind.
function bindKinds(form) {
  const sync = () => {
    const kind = form.querySelector("input[name=trigger_kind]:checked");
    // data-kind lists the kinds an input belongs to ("cron every": the bounds).
    for (const el of form.querySelectorAll("[data-kind]")) {
      el.hidden = !kind || !el.dataset.kind.split(" ").includes(kind.value);
    }
    const runner = form.querySelector("input[name=runner_kind]:checked");
    for (const el of form.querySelectorAll("[data-runner]")) {
      el.hidden = !runner || el.dataset.runner !== runner.value;
    }
  };
  form.addEventListener("change", sync);
  sync();
}

// Ask the server for the trigger's description and next due times 250 ms after typing
// stops; an answer to an older request never overwrites a newer one.
function bindPreview(form) {
  const section = form.querySelector("[data-preview]");
  const box = document.getElementById("preview");
  if (!section || !box) return;
  // Everything that changes which due times come: the trigger, its bounds and DST policies,
  // and max_runs (where the timetable ends).
  const fields = [
    "trigger_kind", "cron", "timezone", "every_seconds", "at", "start_at", "end_at",
    "dst_gap", "dst_repeat", "max_runs",
  ];
  let timer = null;
  let latest = 0;
  const refresh = async () => {
    const sequence = ++latest;
    const body = new URLSearchParams();
    const data = new FormData(form);
    for (const name of fields) body.set(name, data.get(name) || "");
    try {
      const response = await fetch(section.dataset.preview, {
        method: "POST", body, credentials: "same-origin",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
      });
      if (response.status === 401) { location.reload(); return; }
      const html = await response.text();
      if (sequence !== latest) return;
      box.innerHTML = html;  // server-rendered, escaped by the template
      box.classList.toggle("invalid", !response.ok);
      // Mark the input the error names, as the server does for a rejected form; when the
      // server already says the same thing at that input, say it once.
      const failed = box.querySelector("[data-field]");
      const shown = failed && document.getElementById("error-" + failed.dataset.field);
      if (shown && shown.textContent === failed.textContent) failed.remove();
      for (const name of fields.slice(1)) {
        const input = form.querySelector(`[name=${name}]`);
        if (!input) continue;
        if (failed && failed.dataset.field === name) input.setAttribute("aria-invalid", "true");
        else input.removeAttribute("aria-invalid");
      }
      localizeTimes(box);
    } catch (error) {
      if (sequence === latest) box.textContent = "Preview unavailable: " + error;
    }
  };
  const schedule = (event) => {
    if (event && event.target && !fields.includes(event.target.name)) return;
    // A rejected form's message at this input is stale once it changes: the preview speaks.
    if (event && event.type === "input") {
      const stale = document.getElementById("error-" + event.target.name);
      if (stale) stale.remove();
    }
    clearTimeout(timer);
    timer = setTimeout(refresh, 250);
  };
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  refresh();
}

// Reload the run history every 2 s while the page is visible (a hidden tab asks nothing).
function bindPolling(el) {
  const url = el.dataset.poll;
  let busy = false;
  const tick = async () => {
    if (busy || document.visibilityState !== "visible") return;
    // A run whose output is unfolded stays as it is until it is folded again.
    if (el.querySelector("details[open]")) return;
    busy = true;
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.status === 401) { location.reload(); return; }
      if (response.ok) {
        el.innerHTML = await response.text();
        localizeTimes(el);
        bindConfirm(el);
      }
    } catch (_error) {
      // The server is restarting or unreachable: try again at the next tick.
    } finally {
      busy = false;
    }
  };
  setInterval(tick, 2000);
  document.addEventListener("visibilitychange", tick);
}

function bindConfirm(root) {
  for (const form of root.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
}

// The zone of a new cron schedule defaults to the viewer's own.
function defaultZone(form) {
  const zone = form.querySelector("#timezone");
  if (zone && form.dataset.newSchedule !== undefined && zone.value === "UTC" && viewerZone) {
    zone.value = viewerZone;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  localizeTimes(document);
  bindConfirm(document);
  const form = document.getElementById("schedule-form");
  if (form) {
    defaultZone(form);
    bindKinds(form);
    bindPreview(form);
  }
  const runs = document.querySelector("[data-poll]");
  if (runs) bindPolling(runs);
});
