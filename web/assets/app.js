// almanac coverage page: draws the coverage calendar from the JSON API. The
// state lives in the URL's fragment (#series=…&interval=…&from=…&to=…&slot=…),
// so zooming works with the back button and a view can be linked. While the
// page is visible it asks every data-refresh milliseconds whether what it
// shows changed (If-None-Match: an unchanged answer is a bodiless 304) and
// redraws in place, keeping the selection. Every text from the server goes
// through textContent, never innerHTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const body = document.body;
  const actions = body.dataset.actions === "on";
  const csrf = body.dataset.csrf || "";
  const every = Number(body.dataset.refresh || 0);
  const names = { complete: "complete", skipped: "skipped", open: "open", inFlight: "in flight", failed: "failed", parked: "parked", missing: "missing", notDue: "not due yet" };
  // A cell's bar, bottom to top: the finished states first, the urgent ones
  // on top where they catch the eye.
  const stack = ["notDue", "complete", "skipped", "open", "inFlight", "missing", "failed", "parked"];
  const css = { complete: "complete", skipped: "skipped", open: "open", inFlight: "in-flight", missing: "missing", failed: "failed", parked: "parked", notDue: "not-due" };
  // The least share of a cell's height a state present at all is drawn
  // with: one failure in 288 slots is a sliver, not nothing, not the cell.
  const minShare = 0.18;
  let view = null;     // the heatmap shown
  let cells = [];      // its cells, in order
  let rows = [];       // for each row, [index of its first cell, its cell count]
  let rowOf = [];      // for each cell, its row
  let anchor = -1;     // first cell of the selection
  let focus = -1;      // last cell of the selection
  let loads = 0;       // loads finished, for tests (data-loads)
  let refreshes = 0;   // refreshes finished, for tests (data-refreshes)
  let seq = 0;         // bumped by every load: a refresh begun before drops its answers
  const tags = new Map(); // path → { url, etag } of the last answer drawn

  function params() { return new URLSearchParams(location.hash.slice(1)); }

  function go(changes) {
    const p = params();
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === undefined || v === "") p.delete(k); else p.set(k, v);
    }
    location.hash = p.toString();
  }

  // get asks path for p; conditional, it names the entity tag of the answer
  // last drawn for the same request, and an unchanged answer comes back as
  // data null. asOf is when the server read the data. Call drew(answer)
  // once it is drawn: only then does its tag stand for what is shown.
  async function get(path, p, conditional) {
    const url = path + "?" + p.toString();
    const headers = { Accept: "application/json" };
    const known = tags.get(path);
    if (conditional && known && known.url === url) headers["If-None-Match"] = known.etag;
    const res = await fetch(url, { headers, cache: "no-store" });
    const asOf = res.headers.get("Almanac-As-Of") || "";
    if (res.status === 304) return { path, url, data: null, asOf };
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) throw new Error(data.error || res.statusText);
    return { path, url, data, asOf, etag: res.headers.get("ETag") || "" };
  }

  function drew(answer) {
    if (answer.data === null) return;
    if (answer.etag) tags.set(answer.path, { url: answer.url, etag: answer.etag }); else tags.delete(answer.path);
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

  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }

  function summary(c) {
    const parts = [];
    for (const k of Object.keys(names)) if (c[k]) parts.push(c[k] + " " + names[k]);
    return plural(c.slots, "slot", "slots") + (parts.length ? ": " + parts.join(", ") : "");
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

  function viewQuery(p) {
    const q = new URLSearchParams({ series: p.get("series"), interval: p.get("interval") });
    for (const k of ["from", "to", "buckets"]) if (p.get(k)) q.set(k, p.get(k));
    return q;
  }

  // load draws the view the address names, from fresh answers.
  async function load() {
    const my = ++seq;
    const p = params();
    const series = p.get("series"), interval = p.get("interval");
    for (const tr of document.querySelectorAll("#series tbody tr")) {
      const q = new URLSearchParams(tr.dataset.query);
      tr.classList.toggle("current", q.get("series") === series && q.get("interval") === interval);
    }
    const chosen = !!(series && interval);
    if ($("choose")) $("choose").hidden = chosen;
    if (!chosen) {
      view = null;
      $("calendar").hidden = $("failures").hidden = $("history").hidden = true;
      done();
      schedule();
      return;
    }
    const q = viewQuery(p);
    const t0 = performance.now();
    try {
      const [h, f] = await Promise.all([get("api/heatmap", q), get("api/failures", q)]);
      if (my !== seq) return; // a newer load draws
      drawHeatmap(h.data, h.asOf);
      drawFailures(f.data);
      drew(h);
      drew(f);
      body.dataset.renderMs = String(Math.round(performance.now() - t0));
      if (p.get("slot")) {
        const hist = await get("api/history", historyQuery(q, p.get("slot")));
        if (my !== seq) return;
        drawHistory(hist.data, true);
        drew(hist);
      } else {
        $("history").hidden = true;
      }
      say("");
    } catch (e) {
      say(e.message, true);
    }
    done();
    schedule();
  }

  // done marks the end of a load, for people (the status) and for tests,
  // which wait for data-loads to change.
  function done() {
    loads++;
    body.dataset.loads = String(loads);
  }

  // refresh redraws what changed since the last answers: the series table,
  // the calendar, its failures and the slot's history. While a series is
  // shown only its row of the table is asked for (its counts are those of
  // the calendar of the whole series, which the server keeps), else the
  // whole table, once a minute: every row costs the server a calendar.
  async function refresh() {
    const my = seq;
    const p = params();
    const shown = view && p.get("series") && p.get("interval");
    refreshes++;
    try {
      let s = null;
      if (shown) s = await get("api/series", new URLSearchParams({ series: p.get("series"), interval: p.get("interval") }), true);
      else if (refreshes % Math.max(1, Math.round(60000 / every)) === 0) s = await get("api/series", new URLSearchParams(), true);
      if (s) {
        if (s.data) drawSeries(s.data);
        drew(s);
        if (!shown) $("series-asof").textContent = "as of " + s.asOf;
      }
      if (shown) {
        const q = viewQuery(p);
        const [h, f] = await Promise.all([get("api/heatmap", q, true), get("api/failures", q, true)]);
        if (my !== seq) return;
        if (h.data) drawHeatmap(h.data, h.asOf); else showAsOf(h.asOf);
        if (f.data) drawFailures(f.data);
        drew(h);
        drew(f);
        if (p.get("slot")) {
          const hist = await get("api/history", historyQuery(q, p.get("slot")), true);
          if (my === seq && hist.data) {
            drawHistory(hist.data, false);
            drew(hist);
          }
        }
      }
    } catch (e) {
      if (my === seq && view) {
        $("asof").textContent = "Counts as of " + view.asOf + "; checking for changes failed: " + e.message + " (trying again)";
        $("asof").classList.add("error");
      }
    } finally {
      body.dataset.refreshes = String(refreshes);
    }
  }

  let timer = 0;
  let refreshing = false;

  // schedule sets the next refresh, while the page is visible.
  function schedule() {
    clearTimeout(timer);
    if (every > 0 && !document.hidden) timer = setTimeout(tick, every);
  }

  async function tick() {
    if (refreshing) return;
    refreshing = true;
    try { await refresh(); } finally { refreshing = false; }
    schedule();
  }

  function showAsOf(asOf) {
    if (!view) return;
    view.asOf = asOf;
    $("asof").textContent = "Counts as of " + asOf + (every > 0 ? " · checked every " + Math.max(1, Math.round(every / 1000)) + " s" : "");
    $("asof").classList.remove("error");
  }

  // shares splits a cell's height among its states, bottom to top: in
  // proportion, but at least minShare for each state present; null for a
  // cell of one state (or none), drawn in that state's color.
  function shares(c) {
    const present = stack.filter((k) => c[k] > 0);
    if (present.length < 2) return null;
    const total = present.reduce((a, k) => a + c[k], 0);
    const small = present.filter((k) => c[k] / total < minShare);
    const big = present.filter((k) => c[k] / total >= minShare);
    const bigTotal = big.reduce((a, k) => a + c[k], 0);
    const rest = 1 - minShare * small.length;
    if (big.length === 0 || rest <= 0) return present.map((k) => [k, 1 / present.length]);
    return present.map((k) => [k, small.includes(k) ? minShare : c[k] / bigTotal * rest]);
  }

  function sameRange(a, b) {
    return a && b && a.series === b.series && a.interval === b.interval && a.from === b.from && a.to === b.to && a.unit === b.unit;
  }

  // linkedCell is the cell holding the &slot= of the address, -1 if none.
  function linkedCell() {
    const slot = params().get("slot");
    if (!slot) return -1;
    const t = Date.parse(slot);
    return cells.findIndex((c) => Date.parse(c.from) <= t && t < Date.parse(c.to));
  }

  function drawHeatmap(h, asOf) {
    const grid = $("grid");
    // A redraw of the same range keeps the selection and the focus.
    let keep = null;
    if (sameRange(view, h)) {
      const active = grid.contains(document.activeElement) && document.activeElement.classList.contains("cell") ? Number(document.activeElement.dataset.i) : -1;
      keep = { anchor: anchor >= 0 ? cells[anchor].from : null, focus: focus >= 0 ? cells[focus].from : null, active: active >= 0 ? cells[active].from : null };
    }
    view = h;
    cells = [];
    rows = [];
    rowOf = [];
    anchor = focus = -1;
    $("calendar").hidden = false;
    $("cal-title").textContent = "Coverage of " + h.shown + " (" + h.interval + ", " + h.zone + ")";
    const unit = h.unit === "slot" ? "one cell per slot" : "one cell per " + (h.step > 1 ? h.step + " years" : h.unit);
    $("cal-range").textContent = h.fromText + " to " + h.toText + " · " + unit;
    showAsOf(asOf);
    fillCounts($("totals"), h.total, [["covered", pct(h.covered)], ["oldest open", h.oldestOpen || "—"], ["last completion", h.lastCompleted || "—"]]);
    $("zoom-out").disabled = !h.up;
    $("zoom-whole").disabled = !h.up;
    const frag = document.createDocumentFragment();
    const wide = h.unit === "year" || h.unit === "month";
    let most = 0;
    for (const r of h.rows) {
      const row = el("div", { class: "row" });
      const label = el("button", { type: "button", class: "row-label", title: "Zoom in to " + r.label, tabindex: "-1" }, r.label);
      label.addEventListener("click", () => go({ from: r.from, to: r.to, slot: null }));
      const line = el("div", { class: "cells" });
      rows.push([cells.length, r.cells.length]);
      most = Math.max(most, r.cells.length);
      for (const c of r.cells) {
        const i = cells.length;
        cells.push(c);
        rowOf.push(rows.length - 1);
        const split = shares(c);
        const b = el("button", {
          type: "button", class: "cell " + (split ? "mixed" : "s-" + c.state), "data-i": String(i), "data-state": c.state,
          "aria-pressed": "false", "aria-label": c.label + ": " + summary(c), title: c.label + "\n" + summary(c), tabindex: "-1",
        });
        const text = el("span", { class: "t" }, c.short);
        if (split) {
          // The number sits on the largest part, in its text color.
          const bar = el("span", { class: "fill" });
          const largest = split.reduce((a, x) => x[1] > a[1] ? x : a);
          for (const [k, share] of split) {
            const seg = el("span", { class: "s-" + css[k], "data-k": k });
            seg.style.height = (share * 100).toFixed(2) + "%";
            if (k === largest[0]) seg.append(text);
            bar.append(seg);
          }
          b.classList.toggle("tight", largest[1] < 0.5);
          b.append(bar);
        } else {
          b.append(text);
        }
        line.append(b);
      }
      row.append(label, line);
      frag.append(row);
    }
    grid.classList.toggle("wide", wide);
    grid.dataset.most = String(most);
    grid.replaceChildren(frag);
    fit();
    const linked = linkedCell();
    if (linked >= 0) grid.querySelector('.cell[data-i="' + linked + '"]').classList.add("linked");
    const at = (from) => from === null ? -1 : cells.findIndex((c) => c.from === from);
    if (keep && at(keep.anchor) >= 0) {
      anchor = at(keep.anchor);
      select(at(keep.focus) >= 0 ? at(keep.focus) : anchor, true);
    } else {
      select(linked, false);
    }
    if (keep && at(keep.active) >= 0) focusCell(at(keep.active), true);
  }

  // fit picks the calendar's columns: every cell of the longest row side by
  // side when each gets at least minWidth pixels, else that row in as few
  // even lines as make them fit; without room for their text, cells show
  // none (their label says it).
  function fit() {
    const grid = $("grid");
    const line = grid.querySelector(".cells");
    if (!line) return;
    const most = Number(grid.dataset.most) || 1;
    const minWidth = grid.classList.contains("wide") ? 36 : 15;
    const room = Math.max(line.clientWidth, 1);
    const lines = Math.max(1, Math.ceil(most * minWidth / room));
    const cols = Math.ceil(most / lines);
    grid.style.setProperty("--cols", String(cols));
    grid.classList.toggle("dense", room / cols < 14);
  }

  function cellAt(e) {
    const b = e.target.closest(".cell");
    return b ? Number(b.dataset.i) : -1;
  }

  function cellButton(i) { return $("grid").querySelector('.cell[data-i="' + i + '"]'); }

  // focusCell moves the keyboard's focus to cell i, the one cell of the
  // calendar reached with Tab.
  function focusCell(i, quiet) {
    const b = cellButton(i);
    if (!b) return;
    for (const c of $("grid").querySelectorAll('.cell[tabindex="0"]')) c.tabIndex = -1;
    b.tabIndex = 0;
    b.focus({ preventScroll: !!quiet });
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
    let tab = null;
    for (const b of $("grid").querySelectorAll(".cell")) {
      const j = Number(b.dataset.i);
      b.setAttribute("aria-pressed", String(anchor >= 0 && j >= lo && j <= hi));
      if (b.tabIndex === 0) tab = b;
    }
    // The cell Tab reaches: the selection's end, else the one it was.
    const reach = focus >= 0 ? cellButton(focus) : tab || $("grid").querySelector(".cell");
    if (reach && reach !== tab) {
      if (tab) tab.tabIndex = -1;
      reach.tabIndex = 0;
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

  // open shows what is inside cell i: a slot's history, else the cell's
  // range.
  function open(i) {
    const c = cells[i];
    if (view.unit === "slot") go({ slot: c.from }); else go({ from: c.from, to: c.to, slot: null });
  }

  // move answers the calendar's keys on cell i: arrows select the next
  // cell (shift extends), Home and End go to a row's ends, Enter opens.
  function move(e, i) {
    const r = rowOf[i];
    let j = -1;
    switch (e.key) {
    case "ArrowLeft": j = i - 1; break;
    case "ArrowRight": j = i + 1; break;
    case "ArrowUp":
    case "ArrowDown": {
      const to = r + (e.key === "ArrowUp" ? -1 : 1);
      if (to >= 0 && to < rows.length) j = rows[to][0] + Math.min(i - rows[r][0], rows[to][1] - 1);
      break;
    }
    case "Home": j = rows[r][0]; break;
    case "End": j = rows[r][0] + rows[r][1] - 1; break;
    case "Enter": e.preventDefault(); open(i); return;
    default: return;
    }
    e.preventDefault();
    if (j < 0 || j >= cells.length) return;
    select(j, e.shiftKey);
    focusCell(j);
  }

  // escape closes the innermost thing open: the history, else the
  // selection.
  function escape(e) {
    if (e.key !== "Escape" || $("action-dialog").open || !view) return;
    if (params().get("slot")) {
      go({ slot: null });
    } else if (anchor >= 0) {
      select(-1, false);
    } else {
      return;
    }
    e.preventDefault();
  }

  function drawFailures(f) {
    const tbody = $("failures-rows");
    const frag = document.createDocumentFragment();
    for (const x of f.failures) {
      const tr = el("tr", x.overdue ? { "data-overdue": "true" } : {});
      const slot = el("td");
      const a = el("a", { href: "#", class: "history-link", "data-slot": x.slot }, x.slotText);
      a.addEventListener("click", (e) => { e.preventDefault(); go({ slot: x.slot }); });
      slot.append(a);
      const state = el("td");
      state.append(el("span", { class: "state s-" + x.state }, x.state));
      const msg = el("td");
      msg.append(el("div", { class: "msg" }, x.message));
      const next = el("td", { class: "next" });
      if (x.state === "parked") {
        next.textContent = "never (parked)";
      } else {
        next.textContent = x.notBefore || (x.overdue ? "since " + x.at : "now");
        if (x.overdue) next.append(el("span", { class: "overdue" }, "overdue: no worker has taken it"));
      }
      tr.append(slot, state, el("td", { class: "n" }, String(x.attempts)), el("td", { class: "n" }, String(x.failCount)), msg,
        el("td", {}, x.at), next);
      frag.append(tr);
    }
    tbody.replaceChildren(frag);
    const n = f.failures.length;
    $("failures").hidden = n === 0;
    $("failures-note").textContent = (n >= f.limit ? "The latest " + n + " of " : "") +
      (view.total.failed + view.total.parked) + " in this range, latest first. Choose a slot to see its history.";
    drawStalled(f);
    drawWaiting(f);
  }

  // drawWaiting lists what the range's first slots waiting for an upstream
  // series wait on: upstream slots not finished (each opens its history in
  // the upstream's calendar) and parts without an upstream row.
  function drawWaiting(f) {
    const box = $("waiting");
    const list = f.waitingOn || [];
    box.hidden = !f.waitingUpstream;
    if (box.hidden) return;
    const slots = new Set(list.map((x) => x.slot));
    $("waiting-note").textContent = plural(f.waitingUpstream, "slot waits", "slots wait") + " for upstream series" +
      (slots.size < f.waitingUpstream ? "; the first " + plural(slots.size, "of them waits", "of them wait") + " on:" : " on:");
    const frag = document.createDocumentFragment();
    for (const x of list) {
      const li = el("li", { "data-state": x.state });
      const own = el("a", { href: "#", class: "history-link", "data-slot": x.slot }, x.slotText);
      own.addEventListener("click", (e) => { e.preventDefault(); go({ slot: x.slot }); });
      const up = new URLSearchParams(x.query);
      if (x.state === "missing") { up.set("from", x.from); up.set("to", x.to); } else up.set("slot", x.from);
      li.append(own, " waits on " + x.shown + " " + x.interval + " ", el("a", { href: "#" + up.toString(), class: "upstream-link" }, x.text),
        el("span", { class: "state s-" + x.state }, x.state));
      if (x.message) li.append(el("span", { class: "msg" }, x.message));
      frag.append(li);
    }
    $("waiting-rows").replaceChildren(frag);
  }

  // drawStalled warns when failed slots are overdue and no worker has been
  // seen since they fell due (the server decides, see docs/coverage-page.md).
  function drawStalled(f) {
    const b = $("stalled");
    b.hidden = !f.stalled;
    if (!f.stalled) return;
    const since = f.lastSeen ? "since " + f.lastSeen : "yet";
    b.replaceChildren(el("strong", {}, "No worker seems to be running for " + view.shown + ". "),
      plural(f.overdue, "failed slot is", "failed slots are") + " overdue (their next try passed over a minute ago), and no slot of this series has been completed or has failed " + since +
      ". Start a worker for it: almanac run, or the service that registers its job.");
  }

  function historyQuery(q, slot) {
    const p = new URLSearchParams(q);
    p.delete("buckets");
    p.set("slot", slot);
    return p;
  }

  function drawHistory(h, reveal) {
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
    } else if (h.compacted) {
      const c = h.compacted;
      const d = el("div");
      const dd = el("dd");
      dd.append(el("span", { class: "state s-" + c.state, id: "history-state" }, c.state),
        " (compacted: its row was deleted, its run of " + c.state + " slots kept)");
      d.append(el("dt", {}, "now"), dd);
      cur.append(d);
      add("generation", c.generation); add("completed", c.completed);
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
    if (reveal) $("history").scrollIntoView({ block: "nearest" });
  }

  const verbs = { reopen: "Re-open", skip: "Skip", retry: "Retry now" };
  const explain = {
    reopen: "Complete and skipped slots become open again, as a new generation; slots held by workers are left alone.",
    skip: "Open, failed and parked slots are marked skipped, missing ones are created skipped; complete slots are left alone.",
    retry: "Failed slots waiting for their next try, and parked ones, become acquirable now. Overdue ones are acquirable already: they need a running worker.",
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

  function drawSeries(data) {
    for (const s of data.series) {
      const tr = document.querySelector('#series tbody tr[data-query="' + CSS.escape(s.query) + '"]');
      if (!tr) continue;
      for (const td of tr.querySelectorAll("td[data-k]")) {
        const k = td.dataset.k;
        td.textContent = k === "covered" ? pct(s.covered) : (s[k] === "" || s[k] === undefined ? "—" : String(s[k]));
        if (["failed", "parked", "missing"].includes(k)) td.classList.toggle("alert", s[k] > 0);
      }
    }
  }

  async function refreshSeries() {
    try {
      const s = await get("api/series", new URLSearchParams());
      drawSeries(s.data);
      drew(s);
      $("series-asof").textContent = "as of " + s.asOf;
    } catch (e) {
      say(e.message, true);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const grid = $("grid");
    grid.addEventListener("click", (e) => {
      const i = cellAt(e);
      if (i < 0) return;
      select(i, e.shiftKey);
      focusCell(i, true);
    });
    grid.addEventListener("dblclick", (e) => { const i = cellAt(e); if (i >= 0) open(i); });
    grid.addEventListener("keydown", (e) => { const i = cellAt(e); if (i >= 0) move(e, i); });
    document.addEventListener("keydown", escape);
    new ResizeObserver(fit).observe(grid);
    $("sel-zoom").addEventListener("click", () => { const s = selection(); go({ from: s.from, to: s.to, slot: null }); });
    $("sel-history").addEventListener("click", () => go({ slot: selection().from }));
    $("zoom-out").addEventListener("click", () => view && view.up && go({ from: view.up.from, to: view.up.to, slot: null }));
    $("zoom-whole").addEventListener("click", () => go({ from: null, to: null, slot: null }));
    for (const b of document.querySelectorAll("#sel-buttons .act")) b.addEventListener("click", () => openAction(b.dataset.action));
    $("action-form").addEventListener("submit", submitAction);
    $("action-cancel").addEventListener("click", () => $("action-dialog").close());
    window.addEventListener("hashchange", load);
    document.addEventListener("visibilitychange", () => { if (document.hidden) clearTimeout(timer); else tick(); });
    load();
  });
})();
