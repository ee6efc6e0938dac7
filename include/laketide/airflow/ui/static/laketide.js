/* The lakehouse view: plain JS, relative URLs only (the page may live under a base URL or behind a proxy). */
"use strict";
var laketide = (function () {
  var state = { stream: null, picked: null, anchor: null, filter: null, actionDags: {} };

  function $(id) { return document.getElementById(id); }
  function esc(v) {
    return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function n(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"); }
  function secs(v) {
    if (v === null || v === undefined) return "–";
    var a = Math.abs(v);
    if (a < 120) return v.toFixed(0) + " s";
    if (a < 7200) return (v / 60).toFixed(1) + " min";
    if (a < 172800) return (v / 3600).toFixed(1) + " h";
    return (v / 86400).toFixed(1) + " d";
  }
  function bytes(v) {
    var units = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : v) + " " + units[i];
  }
  function get(url) {
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) { throw new Error(r.status + ": " + (body.detail ? JSON.stringify(body.detail) : r.statusText)); }
        return body;
      });
    });
  }
  function fail(el, err) { el.innerHTML = '<p class="error">' + esc(err.message || err) + "</p>"; }
  function table(head, rows) {
    return "<table><tr>" + head.map(function (h) {
      return '<th class="' + (h.charAt(0) === "#" ? "num" : "") + '">' + esc(h.replace(/^#/, "")) + "</th>";
    }).join("") + "</tr>" + rows.join("") + "</table>";
  }
  function api(path) { return "api/streams/" + encodeURIComponent(state.stream) + "/" + path; }
  function q(params) {
    return Object.keys(params).filter(function (k) { return params[k]; }).map(function (k) {
      return k + "=" + encodeURIComponent(params[k]);
    }).join("&");
  }

  // ---------------------------------------------------------------- partition board
  function title(c) {
    var lines = [c.hour + " — " + c.state + (c.checked_now ? " (checked now)" : "")];
    if (c.audit !== null || c.rows !== null) {
      lines.push("audit " + n(c.audit) + " · lake " + n(c.rows) + " · rejects " + n(c.rejects) +
        (c.duplicates_removed ? " · duplicates removed " + n(c.duplicates_removed) : "") + (c.checked_now ? " so far" : ""));
    }
    if (c.reason) lines.push(c.reason);
    return lines.join("\n");
  }
  function daySummary(d) {
    var parts = Object.keys(d.counts).map(function (s) { return s + " " + d.counts[s]; });
    return parts.join(" · ") + " · " + n(d.rows) + " rows · " + n(d.rejects) + " rejects";
  }
  function drawBoard(b) {
    state.filter = b.state;
    $("legend").innerHTML = b.states.map(function (s) {
      return '<button type="button" class="legend-entry' + (b.state === s ? " active" : "") + '" data-legend="' + s +
        '" title="show only the hours ' + s + '"><i class="swatch s-' + s + '"></i>' + s + " " +
        '<b class="muted">' + (b.counts[s] || 0) + "</b></button>";
    }).join("") + '<span class="muted">hatched: checked now (being written) · click an hour, shift-click another for a range</span>';
    $("state-filter").value = b.state || "";
    $("board-meta").textContent = b.table + " · " + b.start + " → " + b.end + " · " + b.cells.length +
      " hours" + (b.state ? " " + b.state : "") + " · answered in " + b.elapsed_ms + " ms";
    var byHour = {}, current = b.now.slice(0, 13);
    b.cells.forEach(function (c) { byHour[c.hour.slice(0, 13)] = c; });
    var html = ['<span></span>'];
    for (var h = 0; h < 24; h++) html.push('<span class="hh">' + (h % 3 === 0 ? String(h).padStart(2, "0") : "") + "</span>");
    html.push('<span class="hh day-sum">per day</span>');
    b.days.forEach(function (d) {  // one row a day: its 24 hours (those shown), then its summary
      html.push('<span class="day">' + esc(d.day) + "</span>");
      for (var h = 0; h < 24; h++) {
        var c = byHour[d.day + "T" + String(h).padStart(2, "0")];
        html.push(!c ? "<span></span>" : '<span class="cell s-' + esc(c.state) + (c.checked_now ? " checked" : "") +
          (c.hour.slice(0, 13) === current ? " now" : "") + '" data-hour="' + esc(c.hour) + '" data-state="' +
          esc(c.state) + '" title="' + esc(title(c)) + '"></span>');
      }
      html.push('<span class="day-sum" data-day="' + esc(d.day) + '">' + esc(daySummary(d)) + "</span>");
    });
    $("board").innerHTML = html.join("");
    Array.prototype.forEach.call(document.querySelectorAll(".cell"), function (el) {
      el.addEventListener("click", function (ev) { pick(el, ev.shiftKey); });
    });
    Array.prototype.forEach.call(document.querySelectorAll(".legend-entry"), function (el) {
      el.addEventListener("click", function () {
        $("state-filter").value = state.filter === el.dataset.legend ? "" : el.dataset.legend;
        loadBoard();
      });
    });
    markPicked();
  }
  // a click picks an hour, a shift-click the range from the hour picked before to this one (both included)
  function pick(el, extend) {
    var hour = el.dataset.hour;
    if (extend && state.anchor) {
      state.picked = state.anchor < hour ? [state.anchor, hour] : [hour, state.anchor];
    } else {
      state.anchor = hour;
      state.picked = [hour, hour];
      showHour(el);
    }
    markPicked();
  }
  function nextHour(hour) { return new Date(Date.parse(hour) + 3600000).toISOString().slice(0, 19) + "+00:00"; }
  function markPicked() {
    var p = state.picked;
    Array.prototype.forEach.call(document.querySelectorAll(".cell"), function (c) {
      c.classList.toggle("selected", !!p && c.dataset.hour >= p[0] && c.dataset.hour <= p[1]);
    });
    var hours = p ? Math.round((Date.parse(p[1]) - Date.parse(p[0])) / 3600000) + 1 : 0;
    $("selection").textContent = p ? p[0] + (hours > 1 ? " → " + p[1] + " (" + hours + " hours)" : " (1 hour)")
      : "no hour selected";
  }
  function runDag(runId, dag) { return (state.actionDags || {})[runId] || dag; }
  function showHour(el) {
    var box = $("hour");
    box.hidden = false;
    box.textContent = "loading " + el.dataset.hour + " …";
    var closeDag = "laketide_close_" + state.stream;
    get(api("hours/" + encodeURIComponent(el.dataset.hour))).then(function (d) {
      var c = d.cell;
      var head = "<b>" + esc(d.hour) + "</b> — " + '<i class="swatch s-' + esc(c.state) + '"></i> ' + esc(c.state) +
        (c.checked_now ? " (checked now, not recorded: counts so far)" : "") + '<dl class="kv">' +
        "<dt>audit</dt><dd>" + n(c.audit) + "</dd><dt>lake</dt><dd>" + n(c.rows) + "</dd><dt>rejects</dt><dd>" +
        n(c.rejects) + "</dd><dt>duplicates removed</dt><dd>" + n(c.duplicates_removed) + "</dd><dt>snapshot</dt><dd>" +
        esc(c.snapshot_id || "–") + "</dd><dt>run</dt><dd>" + (c.run_id ? runLink(runDag(c.run_id, closeDag), c.run_id, "hour-run") : "–") +
        '</dd><dt>reason</dt><dd class="wrap">' + esc(c.reason || "") + "</dd></dl>";
      var rows = d.steps.slice().reverse().map(function (s) {
        return "<tr><td>" + esc(s.recorded_at) + '</td><td><i class="swatch s-' + esc(s.state) + '"></i> ' +
          esc(s.state) + '</td><td class="num">' + n(s.audit) + '</td><td class="num">' + n(s.rows) +
          '</td><td class="num">' + n(s.rejects) + "</td><td>" + (s.run_id ? runLink(runDag(s.run_id, closeDag), s.run_id) : "") +
          '</td><td class="wrap">' + esc(s.reason || "") + "</td></tr>";
      });
      box.innerHTML = head + (rows.length ? table(["recorded", "state", "#audit", "#lake", "#rejects", "run", "reason"], rows)
        : '<p class="muted">nothing recorded for this hour yet</p>');
    }).catch(function (e) { fail(box, e); });
  }
  function loadBoard() {
    var params = { days: $("days").value, start: $("start").value.trim(), end: $("end").value.trim(),
      state: $("state-filter").value };
    $("board").textContent = "loading …";
    return get(api("board?" + q(params))).then(drawBoard).catch(function (e) { fail($("board"), e); });
  }

  // ---------------------------------------------------------------- runs: started through Airflow's REST API, opened at top
  // a run's page in Airflow's UI (relative to this page under <base>/laketide/)
  function runHref(dag, runId) { return "../dags/" + encodeURIComponent(dag) + "/runs/" + encodeURIComponent(runId); }
  function runLink(dag, runId, id) {
    return '<a class="run" ' + (id ? 'id="' + id + '" ' : "") + 'href="' + esc(new URL(runHref(dag, runId), location.href).href) +
      '">' + esc(runId) + "</a>";
  }
  // Airflow shows this page in an iframe sandboxed without top navigation or pop-ups (target=_top and _blank do
  // nothing). The frame is of Airflow's origin, so Airflow's own router moves the page: the run's URL is pushed on
  // the top window's history and announced as a history move (popstate), as the back button does.
  function openTop(href) {
    var top = window.top;
    try {
      if (top !== window && top.location.origin === location.origin) {
        var at = top.history.state && typeof top.history.state.idx === "number" ? top.history.state.idx : 0;
        top.history.pushState({ usr: null, key: Math.random().toString(36).slice(2, 10), idx: at + 1 }, "", href);
        top.dispatchEvent(new top.PopStateEvent("popstate", { state: top.history.state }));
        return;
      }
    } catch (e) { /* another origin: open it here */ }
    location.href = href;
  }
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a.run");
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;  // a new tab: the browser's own
    ev.preventDefault();
    openTop(a.href);
  });
  // start a run of ``dag`` with ``conf`` as the logged-in user (the UI's cookie); resolves to the run's link
  function startRun(dag, conf, note) {
    return fetch("../api/v2/dags/" + encodeURIComponent(dag) + "/dagRuns", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ logical_date: null, conf: conf, note: note })
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) throw new Error(r.status + ": " + JSON.stringify(body.detail || body));
        return runLink(dag, body.dag_run_id, "run-link") + " (" + esc(body.state) + ")";
      });
    });
  }

  // ---------------------------------------------------------------- actions on the selected hours
  var STATES = ["open", "lagging", "gap", "complete", "empty", "verified", "failed", "closed", "reopened", "none"];
  var ACTION_NAMES = { close: "close range", backfill: "backfill", repair: "repair", redo: "redo" };
  function showActions(s) {
    var stream = s.streams.filter(function (x) { return x.name === state.stream; })[0] || {};
    var allowed = { close: stream.may_close, backfill: s.may_backfill, repair: s.may_repair, redo: s.may_redo };
    Array.prototype.forEach.call(document.querySelectorAll("[data-action]"), function (b) {
      b.hidden = !allowed[b.dataset.action];  // a button the user may not use is not shown
    });
    $("actions").hidden = !Object.keys(allowed).some(function (k) { return allowed[k]; });
  }
  function act(action) {
    var out = $("action-result"), p = state.picked;
    if (!p) { out.innerHTML = '<p class="error">no hour selected: click an hour on the board (shift-click another for a range); nothing started</p>'; return; }
    out.textContent = "checking " + ACTION_NAMES[action] + " of " + p[0] + " → " + p[1] + " …";
    get(api("actions/" + action + "?" + q({ start: p[0], end: nextHour(p[1]) }))).then(function (plan) {
      var conf = Object.assign({}, plan.conf), dry = plan.dry_run && $("action-dry").checked;
      if (plan.dry_run) conf.dry_run = dry;
      if (plan.dry_run && !dry && !window.confirm("Not a dry run: " + ACTION_NAMES[action] + " changes the tables. Start it?")) {
        out.textContent = "nothing started"; return null;
      }
      var what = (dry ? "dry run: " : "") + ACTION_NAMES[action] + " of " + plan.stream + " [" + p[0] + ", " + nextHour(p[1]) + ")";
      return startRun(plan.dag_id, conf, what + " (lakehouse view)").then(function (link) {
        out.innerHTML = "<p>Started " + esc(what) + ", " + esc(plan.dag_id) + ": " + link + '</p><p class="muted">' +
          esc(plan.note) + (action === "redo" ? ' · <a href="redo?' + q({ stream: plan.stream, snapshot_id: conf.snapshot_id,
          start: conf.start, end: conf.end }) + '">its plan on the redo confirmation page</a>' : "") + "</p>";
      });
    }).catch(function (e) { fail(out, e); });
  }

  // ---------------------------------------------------------------- writer, landing, snapshots, actions, health
  function loadWriter() {
    return get(api("writer")).then(function (w) {
      var badge = '<span class="badge ' + esc(w.state.split(" ")[0]) + '">' + esc(w.state) + "</span>";
      var holder = w.holder ? " · " + esc(w.holder.mode) + " on " + esc(w.holder.host) + " pid " + w.holder.pid +
        ", heartbeat " + secs(w.holder.heartbeat_age_s) + " ago" : "";
      var f = w.freshness;
      var r = w.reported;
      var app = r ? '<span class="badge ' + esc(r.state === "held out" ? "failed held-out" : r.state) + '">' + esc(r.state) + "</span> in application " +
        esc(r.application || r.group) + (r.reason ? ' <span class="wrap">' + esc(r.reason) + "</span>" : "") +
        " <span class=muted>(reported " + esc(r.updated_at) + ")</span>" : '<span class="muted">not reported yet</span>';
      if (w.state === "held by redo") {  // the application's own words are about a busy lease: say what it is
        app = "held by a redo (the runs of laketide_redo); the writer resumes after it" +
          (r ? " <span class=muted>(application " + esc(r.application || r.group) + ": " + esc(r.state) + ")</span>" : "");
      }
      var kv = '<dl class="kv"><dt>writer</dt><dd>' + badge + " " + esc(w.writer_id) + holder + "</dd>" +
        "<dt>group " + esc(w.group) + "</dt><dd>" + app + "</dd>" +
        "<dt>lag</dt><dd>" + secs(w.lag_s) + " <span class=muted>(now − watermark " + esc(w.watermark || "none") + ")</span></dd>" +
        "<dt>backlog</dt><dd>" + w.backlog_files + " file(s), " + bytes(w.backlog_bytes) +
        (w.oldest_backlog ? " <span class=muted>oldest " + esc(w.oldest_backlog) + ", landed " + esc(w.oldest_backlog_landed) + "</span>" : "") + "</dd>" +
        "<dt>landed → committed</dt><dd>" + (f.files ? "median " + secs(f.median_s) + ", p95 " + secs(f.p95_s) +
          ", max " + secs(f.max_s) +
          " <span class=muted>(" + f.files + " file(s) in " + f.commits + " commit(s), last hour)</span>" : "no commit in the last hour") + "</dd>" +
        "<dt>last commit</dt><dd>" + esc(w.last_commit || "none") + "</dd></dl>";
      var keyed = w.batches.some(function (b) { return b.operations; });  // an upsert stream: what each merge did
      var ops = function (b) {
        var o = b.operations || {};
        return '</td><td class="num">' + (b.operations ? n(o.insert || 0) + " / " + n(o.update || 0) +
          (o.upsert ? " (+" + n(o.upsert) + " upserts)" : "") + " / " + n(o["delete"] || 0) : "–");
      };
      var rows = w.batches.map(function (b) {
        return '<tr><td class="num">' + b.batch_id + '</td><td class="num">' + n(b.rows) + '</td><td class="num">' +
          n(b.rejects) + (keyed ? ops(b) : "") + '</td><td class="wrap">' + esc((b.min_event_time || "–") + " → " + (b.max_event_time || "–")) + '</td><td class="wrap">' +
          esc(b.committed_at) + '</td><td class="num">' + secs(b.freshness_s) + "</td></tr>";
      });
      var head = ["#batch", keyed ? "#changes" : "#rows", "#rejects"].concat(keyed ? ["#keys inserted / updated / deleted"] : [])
        .concat(["event times", "committed", "#landed→committed"]);
      // the batches' table wraps its times and scrolls inside the column when it still does not fit
      $("writer").innerHTML = kv + (rows.length ? '<div class="scroll">' + table(head, rows) + "</div>" : "");
    }).catch(function (e) { fail($("writer"), e); });
  }
  function loadLanding() {
    return get(api("landing")).then(function (l) {
      var rows = l.reported.map(function (f) {
        return "<tr><td>" + esc(f.file) + "</td><td>" + esc(f.reason) + (f.blocking ? "" : " <span class=muted>(note)</span>") +
          "</td><td>" + esc(f.hours.join(", ")) + "</td><td>" + esc(f.source) + '</td><td class="wrap">' + esc(f.detail) + "</td></tr>";
      });
      $("landing").innerHTML = "<p>" + l.pending.length + " landed file(s) not committed yet" +
        (l.pending.length ? ": " + esc(l.pending.slice(0, 5).join(", ")) + (l.pending.length > 5 ? ", …" : "") : "") + "</p>" +
        (rows.length ? table(["file", "reason", "hours", "found by", "detail"], rows) : '<p class="muted">no reported file</p>');
    }).catch(function (e) { fail($("landing"), e); });
  }
  function loadSnapshots() {
    return get(api("snapshots?limit=30")).then(function (t) {
      var rows = t.snapshots.map(function (s) {
        var redo = s.current ? '<span class="muted">current</span>' : !state.mayRedo ? "" :
          '<a class="redo" href="redo?' + q({ stream: state.stream, snapshot_id: s.snapshot_id }) + '">redo from here</a>';
        return "<tr><td>" + esc(s.snapshot_id) + "</td><td>" + esc(s.committed_at) + "</td><td>" + esc(s.what) +
          '</td><td class="num">' + n(s.rows) + '</td><td class="num">' + n(s.rejects) + "</td><td>" +
          esc(s.watermark || "") + "</td><td>" + redo + "</td></tr>";
      });
      $("snapshots").innerHTML = rows.length ? table(["snapshot id", "committed", "what", "#rows", "#rejects", "watermark", ""], rows)
        : '<p class="muted">no snapshot yet (the writer creates the table)</p>';
    }).catch(function (e) { fail($("snapshots"), e); });
  }
  function changes(hours) {
    return Object.keys(hours).map(function (h) {
      var c = hours[h];
      return esc(h.slice(0, 13)) + ": " + n(c.rows_before) + " → " + n(c.rows_after) +
        (c.duplicates_removed ? " (−" + n(c.duplicates_removed) + " dup)" : "");
    }).join("<br>");
  }
  function loadHistory() {
    return get(api("history")).then(function (h) {
      state.actionDags = {};  // the run ids of redo, backfill and repair runs: an hour's run links to its DAG
      h.actions.forEach(function (a) { if (a.run_id) state.actionDags[a.run_id] = "laketide_" + a.action; });
      var rows = h.actions.map(function (a) {
        return "<tr><td>" + esc(a.recorded_at) + "</td><td>" + esc(a.action) + "</td><td>" + esc(a.outcome) +
          (a.dry_run ? " <span class=muted>(dry run)</span>" : "") + "</td><td>" + esc(a.requested_by || "") + "</td><td>" +
          esc(a.from_snapshot || "–") + " → " + esc(a.to_snapshot || "–") + '</td><td class="wrap">' + changes(a.hours) +
          "</td><td>" + esc(a.run_id || a.action_id) + "</td></tr>";
      });
      $("history").innerHTML = rows.length ? table(["when", "action", "outcome", "who", "snapshot from → to", "rows before → after per hour", "run"], rows)
        : '<p class="muted">no redo, backfill or repair yet</p>';
    }).catch(function (e) { fail($("history"), e); });
  }
  function loadHealth() {
    return get("api/health").then(function (h) {
      var rows = h.tables.map(function (t) {
        return "<tr><td>" + esc(t.table) + '</td><td class="num">' + n(t.files) + '</td><td class="num">' +
          (t.small_file_ratio * 100).toFixed(0) + '%</td><td class="num">' +
          (t.delete_files ? n(t.delete_files) + " (" + (t.delete_file_share * 100).toFixed(0) + "%, " + n(t.deleted_rows) + " rows)" : "0") +
          '</td><td class="num">' + n(t.closed_hours) + '</td><td class="num">' +
          n(t.max_files_per_closed_hour) + '</td><td class="num">' + n(t.manifests) + '</td><td class="num">' + n(t.snapshots) +
          '</td><td class="num">' + bytes(t.metadata_bytes) + "</td><td>" + esc(t.last_maintenance || "never") + "</td></tr>";
      });
      var steps = h.maintenance.slice(0, 15).map(function (m) {
        return "<tr><td>" + esc(m.started_at) + "</td><td>" + esc(m.outcome) + '</td><td class="wrap">' + esc(m.line) + "</td></tr>";
      });
      $("health").innerHTML = table(["table", "#files", "#small", "#delete files", "#closed h", "#max files/closed h", "#manifests", "#snapshots", "#metadata", "last maintenance"], rows) +
        (steps.length ? "<h2>Recent maintenance</h2>" + table(["started", "outcome", "what"], steps) : '<p class="muted">no maintenance recorded yet</p>');
    }).catch(function (e) { fail($("health"), e); });
  }
  function loadAll() {
    $("status").textContent = "loading …";
    return Promise.all([loadBoard(), loadWriter(), loadLanding(), loadSnapshots(), loadHistory(), loadHealth()])
      .then(function () { $("status").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC"; });
  }
  function main() {
    get("api/streams").then(function (s) {
      state.mayRedo = s.may_redo;  // a user who may not start a redo gets no link to one
      state.streams = s;
      $("stream").innerHTML = s.streams.map(function (x) { return "<option>" + esc(x.name) + "</option>"; }).join("");
      var wanted = new URLSearchParams(location.search).get("stream");
      state.stream = wanted && s.streams.some(function (x) { return x.name === wanted; }) ? wanted : (s.streams[0] || {}).name;
      $("stream").value = state.stream;
      if (!state.stream) { $("status").textContent = "no stream configured"; return; }
      showActions(s);
      loadAll();
    }).catch(function (e) { fail($("board"), e); });
    $("stream").addEventListener("change", function () {
      state.stream = $("stream").value;
      state.picked = state.anchor = null;
      showActions(state.streams);
      loadAll();
    });
    $("days").addEventListener("change", loadBoard);
    $("state-filter").innerHTML = '<option value="">every state</option>' + STATES.map(function (s) {
      return "<option>" + s + "</option>";
    }).join("");
    $("state-filter").addEventListener("change", loadBoard);
    Array.prototype.forEach.call(document.querySelectorAll("[data-action]"), function (b) {
      b.addEventListener("click", function () { act(b.dataset.action); });
    });
    $("refresh").addEventListener("click", loadAll);
  }

  // ---------------------------------------------------------------- "redo from here": the confirmation page
  function redoPage() {
    var params = new URLSearchParams(location.search);
    state.stream = params.get("stream");
    var snapshot = params.get("snapshot_id"), plan = null;
    $("p-stream").textContent = state.stream || "";
    $("p-snapshot").textContent = snapshot || "";
    $("p-start").value = params.get("start") || "";  // from the board's redo of an hour range
    $("p-end").value = params.get("end") || "";
    $("p-dry").addEventListener("change", function () {
      $("warning").hidden = $("p-dry").checked;
      $("trigger").textContent = $("p-dry").checked ? "Start dry run" : "Start redo";
    });
    $("trigger").disabled = true;
    get(api("redo-plan?" + q({ snapshot_id: snapshot }))).then(function (p) {
      plan = p;
      $("dag-id").textContent = p.dag_id;
      $("plan").textContent = p.report.join("\n");
      $("note").textContent = p.note;
      $("trigger").disabled = false;
    }).catch(function (e) { fail($("result"), e); });
    $("redo-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      if (!plan) return;
      var conf = Object.assign({}, plan.conf, {
        start: $("p-start").value.trim() || null, end: $("p-end").value.trim() || null, dry_run: $("p-dry").checked
      });
      $("trigger").disabled = true;
      $("result").textContent = "starting …";
      // Airflow's own REST API, as the logged-in user (the UI's cookie): relative to this page under /laketide/
      startRun(plan.dag_id, conf, (conf.dry_run ? "dry run: " : "") + "redo of " + conf.stream + " from snapshot " +
        conf.snapshot_id + " (lakehouse view)").then(function (link) {
        $("result").innerHTML = "<p>Started " + (conf.dry_run ? "a dry run" : "the redo") + ": " + link + "</p>";
      }).catch(function (e) { fail($("result"), e); $("trigger").disabled = false; });
    });
  }

  return { main: main, redoPage: redoPage };
})();
