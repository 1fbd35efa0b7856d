// almanac coverage page: draws the coverage calendar from the JSON API. The
// state lives in the URL's fragment (#series=…&interval=…&from=…&to=…&slot=…),
// so zooming works with the back button and a view can be linked. Every text
// from the server goes through textContent, never innerHTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const body = document.body;
  const actions = body.dataset.actions === "on";
  const csrf = body.dataset.csrf || "";
  const names = { complete: "complete", skipped: "skipped", open: "open", inFlight: "in flight", failed: "failed", parked: "parked", missing: "missing" };
  let view = null;     // the heatmap shown
  let cells = [];      // its cells, in order
  let anchor = -1;     // first cell of the selection
  let focus = -1;      // last cell of the selection
  let loads = 0;

  function params() { return new URLSearchParams(location.hash.slice(1)); }

  function go(changes) {
    const p = params();
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === undefined || v === "") p.delete(k); else p.set(k, v);
    }
    location.hash = p.toString();
  }

  async function get(path, p) {
    const res = await fetch(path + "?" + p.toString(), { headers: { Accept: "application/json" } });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) throw new Error(data.error || res.statusText);
    return data;
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function say(text, error) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", !!error);
  }

  function summary(c) {
    const parts = [];
    for (const k of Object.keys(names)) if (c[k]) parts.push(c[k] + " " + names[k]);
    return c.slots + (c.slots === 1 ? " slot" : " slots") + (parts.length ? ": " + parts.join(", ") : "");
  }

  // fillCounts lists counts c in dl, the zero ones too unless terse.
  function fillCounts(dl, c, extra, terse) {
    dl.replaceChildren();
    const add = (k, v, cls) => {
      const d = el("div", cls ? { "data-k": cls } : {});
      d.append(el("dt", {}, k), el("dd", {}, String(v)));
      dl.append(d);
    };
    add("slots", c.slots, "slots");
    for (const k of Object.keys(names)) if (c[k] || !terse) add(names[k], c[k], k);
    for (const [k, v] of extra || []) add(k, v);
  }

  function pct(p) { return (p < 100 && p > 99.9 ? "99.9" : p.toFixed(1)) + " %"; }

  async function load() {
    const p = params();
    const series = p.get("series"), interval = p.get("interval");
    for (const tr of document.querySelectorAll("#series tbody tr")) {
      const q = new URLSearchParams(tr.dataset.query);
      tr.classList.toggle("current", q.get("series") === series && q.get("interval") === interval);
    }
    if (!series || !interval) {
      $("calendar").hidden = $("failures").hidden = $("history").hidden = true;
      done();
      return;
    }
    const q = new URLSearchParams({ series, interval });
    if (p.get("from")) q.set("from", p.get("from"));
    if (p.get("to")) q.set("to", p.get("to"));
    if (p.get("buckets")) q.set("buckets", p.get("buckets"));
    const t0 = performance.now();
    try {
      const [h, f] = await Promise.all([get("api/heatmap", q), get("api/failures", q)]);
      drawHeatmap(h);
      drawFailures(f, h);
      body.dataset.renderMs = String(Math.round(performance.now() - t0));
      if (p.get("slot")) await drawHistory(q, p.get("slot")); else $("history").hidden = true;
      say("");
    } catch (e) {
      say(e.message, true);
    }
    done();
  }

  // done marks the end of a load, for people (the status) and for tests,
  // which wait for data-loads to change.
  function done() {
    loads++;
    body.dataset.loads = String(loads);
  }

  function drawHeatmap(h) {
    view = h;
    cells = [];
    anchor = focus = -1;
    $("calendar").hidden = false;
    $("cal-title").textContent = "Coverage of " + h.shown + " (" + h.interval + ", " + h.zone + ")";
    const unit = h.unit === "slot" ? "one cell per slot" : "one cell per " + (h.step > 1 ? h.step + " years" : h.unit);
    $("cal-range").textContent = h.fromText + " to " + h.toText + " · " + unit + " · counts as of " + h.asOf;
    fillCounts($("totals"), h.total, [["covered", pct(h.covered)], ["oldest open", h.oldestOpen || "—"], ["last completion", h.lastCompleted || "—"]]);
    $("zoom-out").disabled = !h.up;
    $("zoom-whole").disabled = !h.up;
    const grid = $("grid");
    const frag = document.createDocumentFragment();
    const wide = h.unit === "year" || h.unit === "month";
    for (const r of h.rows) {
      const row = el("div", { class: "row" });
      const label = el("button", { type: "button", class: "row-label", title: "Zoom in to " + r.label }, r.label);
      label.addEventListener("click", () => go({ from: r.from, to: r.to, slot: null }));
      const line = el("div", { class: "cells" });
      for (const c of r.cells) {
        const i = cells.length;
        cells.push(c);
        const b = el("button", {
          type: "button", class: "cell s-" + c.state + (wide ? " wide" : ""), "data-i": String(i), "data-state": c.state,
          "aria-pressed": "false", "aria-label": c.label + ": " + summary(c), title: c.label + "\n" + summary(c),
        }, c.short);
        line.append(b);
      }
      row.append(label, line);
      frag.append(row);
    }
    grid.replaceChildren(frag);
    select(-1, false);
  }

  function cellAt(e) {
    const b = e.target.closest(".cell");
    return b ? Number(b.dataset.i) : -1;
  }

  function select(i, extend) {
    if (i < 0) {
      anchor = focus = -1;
    } else if (extend && anchor >= 0) {
      focus = i;
    } else {
      anchor = focus = i;
    }
    const lo = Math.min(anchor, focus), hi = Math.max(anchor, focus);
    for (const b of $("grid").querySelectorAll(".cell")) {
      const j = Number(b.dataset.i);
      b.setAttribute("aria-pressed", String(anchor >= 0 && j >= lo && j <= hi));
    }
    const none = anchor < 0;
    const sum = { slots: 0 };
    for (const k of Object.keys(names)) sum[k] = 0;
    for (let j = lo; !none && j <= hi; j++) for (const k of Object.keys(sum)) sum[k] += cells[j][k];
    $("sel-range").textContent = none ? "Select a cell." : lo === hi ? cells[lo].label : cells[lo].label + " through " + cells[hi].label + " (" + (hi - lo + 1) + " cells)";
    if (none) $("sel-counts").replaceChildren(); else fillCounts($("sel-counts"), sum, [], true);
    $("sel-zoom").hidden = none || sum.slots <= 1 && lo === hi;
    $("sel-history").hidden = none || !(view.unit === "slot" && lo === hi);
    const loggedIn = actions && csrf !== "";
    for (const b of document.querySelectorAll("#sel-buttons .act")) b.hidden = none || !loggedIn;
    $("sel-login").hidden = none || !actions || loggedIn;
  }

  function selection() {
    const lo = Math.min(anchor, focus), hi = Math.max(anchor, focus);
    return { from: cells[lo].from, to: cells[hi].to };
  }

  function drawFailures(f, h) {
    const tbody = $("failures-rows");
    const frag = document.createDocumentFragment();
    for (const x of f.failures) {
      const tr = el("tr");
      const slot = el("td");
      const a = el("a", { href: "#", class: "history-link", "data-slot": x.slot }, x.slotText);
      a.addEventListener("click", (e) => { e.preventDefault(); go({ slot: x.slot }); });
      slot.append(a);
      const state = el("td");
      state.append(el("span", { class: "state s-" + x.state }, x.state));
      const msg = el("td");
      msg.append(el("div", { class: "msg" }, x.message));
      tr.append(slot, state, el("td", { class: "n" }, String(x.attempts)), el("td", { class: "n" }, String(x.failCount)), msg,
        el("td", {}, x.at), el("td", {}, x.state === "parked" ? "never (parked)" : x.notBefore || "now"));
      frag.append(tr);
    }
    tbody.replaceChildren(frag);
    const n = f.failures.length;
    $("failures").hidden = n === 0;
    $("failures-note").textContent = (n >= f.limit ? "The latest " + n + " of " : "") +
      (h.total.failed + h.total.parked) + " in this range, latest first. Choose a slot to see its history.";
  }

  async function drawHistory(q, slot) {
    const p = new URLSearchParams(q);
    p.set("slot", slot);
    const h = await get("api/history", p);
    $("history").hidden = false;
    $("history-h").textContent = "History of slot " + h.slot + " to " + h.end;
    const cur = $("history-current");
    cur.replaceChildren();
    const add = (k, v) => {
      if (v === "" || v === undefined || v === null) return;
      const d = el("div");
      d.append(el("dt", {}, k), el("dd", {}, String(v)));
      cur.append(d);
    };
    if (h.current) {
      const c = h.current;
      const d = el("div");
      const dd = el("dd");
      dd.append(el("span", { class: "state s-" + c.state, id: "history-state" }, c.state));
      d.append(el("dt", {}, "now"), dd);
      cur.append(d);
      add("generation", c.generation); add("attempts", c.attempts); add("failures", c.failCount);
      add("held by", c.owner); add("lease until", c.leaseUntil); add("next try", c.notBefore);
      add("message", c.message); add("completed", c.completed); add("updated", c.updated);
    } else {
      add("now", "missing: no row for this slot");
    }
    const frag = document.createDocumentFragment();
    for (const e of h.events) {
      const tr = el("tr", { "data-event": e.event });
      const msg = el("td");
      msg.append(el("div", { class: "msg" }, e.message || ""));
      tr.append(el("td", {}, e.at), el("td", {}, e.event.replace("_", " ")), el("td", { class: "n" }, String(e.generation)),
        el("td", {}, e.actor || ""), el("td", {}, e.owner || ""), el("td", { class: "n" }, e.fence ? String(e.fence) : ""),
        el("td", { class: "n" }, e.attempt ? String(e.attempt) : ""), msg);
      frag.append(tr);
    }
    $("history-rows").replaceChildren(frag);
    $("history-empty").hidden = h.events.length > 0;
    $("history").scrollIntoView({ block: "nearest" });
  }

  const verbs = { reopen: "Re-open", skip: "Skip", retry: "Retry now" };
  const explain = {
    reopen: "Complete and skipped slots become open again, as a new generation; slots held by workers are left alone.",
    skip: "Open, failed and parked slots are marked skipped, missing ones are created skipped; complete slots are left alone.",
    retry: "Failed slots waiting for their retry, and parked ones, become acquirable now.",
  };
  let pending = "";

  function openAction(action) {
    const s = selection();
    pending = action;
    $("action-h").textContent = verbs[action] + " a range of " + view.shown;
    $("action-what").textContent = explain[action];
    $("action-from").value = s.from;
    $("action-to").value = s.to;
    $("action-reason").value = "";
    $("action-error").hidden = true;
    $("action-dialog").showModal();
    $("action-reason").focus();
  }

  async function submitAction(e) {
    e.preventDefault();
    const form = new URLSearchParams({
      action: pending, series: view.series, interval: view.interval,
      from: $("action-from").value, to: $("action-to").value, reason: $("action-reason").value,
    });
    const res = await fetch("api/action", { method: "POST", body: form, headers: { "X-CSRF-Token": csrf } });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) {
      $("action-error").textContent = data.error || res.statusText;
      $("action-error").hidden = false;
      return;
    }
    $("action-dialog").close();
    say(verbs[pending] + ": " + data.result);
    await refreshSeries();
    await load();
  }

  async function refreshSeries() {
    try {
      const data = await get("api/series", new URLSearchParams());
      for (const s of data.series) {
        const tr = document.querySelector('#series tbody tr[data-query="' + CSS.escape(s.query) + '"]');
        if (!tr) continue;
        for (const td of tr.querySelectorAll("td[data-k]")) {
          const k = td.dataset.k;
          td.textContent = k === "covered" ? pct(s.covered) : (s[k] === "" || s[k] === undefined ? "—" : String(s[k]));
          if (["failed", "parked", "missing"].includes(k)) td.classList.toggle("alert", s[k] > 0);
        }
      }
    } catch (e) {
      say(e.message, true);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const grid = $("grid");
    grid.addEventListener("click", (e) => { const i = cellAt(e); if (i >= 0) select(i, e.shiftKey); });
    grid.addEventListener("dblclick", (e) => {
      const i = cellAt(e);
      if (i < 0) return;
      const c = cells[i];
      if (view.unit === "slot") go({ slot: c.from }); else go({ from: c.from, to: c.to, slot: null });
    });
    $("sel-zoom").addEventListener("click", () => { const s = selection(); go({ from: s.from, to: s.to, slot: null }); });
    $("sel-history").addEventListener("click", () => go({ slot: selection().from }));
    $("zoom-out").addEventListener("click", () => view && view.up && go({ from: view.up.from, to: view.up.to, slot: null }));
    $("zoom-whole").addEventListener("click", () => go({ from: null, to: null, slot: null }));
    for (const b of document.querySelectorAll("#sel-buttons .act")) b.addEventListener("click", () => openAction(b.dataset.action));
    $("action-form").addEventListener("submit", submitAction);
    $("action-cancel").addEventListener("click", () => $("action-dialog").close());
    window.addEventListener("hashchange", load);
    load();
  });
})();
