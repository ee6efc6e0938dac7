/* The lakehouse view's charts: SVG drawn here (no library, nothing fetched but the view's own JSON), relative URLs. */
"use strict";
var laketideCharts = (function () {
  var NS = "http://www.w3.org/2000/svg", W = 640, H = 150, PAD = 34;

  function $(id) { return document.getElementById(id); }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function titled(e, text) { e.appendChild(el("title", {}, text)); return e; }
  function frame(max, first, last) {
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img" });
    svg.appendChild(el("line", { x1: PAD, y1: H - 18, x2: W - 4, y2: H - 18, stroke: "#9ca3af" }));
    svg.appendChild(el("text", { x: 2, y: 12, "font-size": 10, fill: "#4b5563" }, fmt(max)));
    svg.appendChild(el("text", { x: 2, y: H - 20, "font-size": 10, fill: "#4b5563" }, "0"));
    svg.appendChild(el("text", { x: PAD, y: H - 4, "font-size": 10, fill: "#4b5563" }, first || ""));
    svg.appendChild(el("text", { x: W - 4, y: H - 4, "font-size": 10, fill: "#4b5563", "text-anchor": "end" }, last || ""));
    return svg;
  }
  function fmt(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return String(Math.round(v * 10) / 10);
  }
  function y(v, max) { return H - 18 - (max ? v / max : 0) * (H - 30); }
  function legend(items) {
    return items.map(function (i) {
      return '<span><i class="swatch" style="background:' + i[1] + '"></i>' + i[0] + "</span>";
    }).join(" ");
  }
  function box(id, title, items, svg, empty) {
    var div = $(id);
    div.innerHTML = "<h3>" + title + ' <span class="muted">' + legend(items) + "</span></h3>";
    div.appendChild(svg || document.createTextNode(empty));
  }

  // bars: one group per item, one bar per series (side by side), heights on one scale
  function bars(data, series, label) {
    var max = Math.max.apply(null, [1].concat(data.map(function (d) {
      return Math.max.apply(null, series.map(function (s) { return d[s[0]] || 0; }));
    })));
    var svg = frame(max, data.length ? label(data[0]) : "", data.length ? label(data[data.length - 1]) : "");
    var step = (W - PAD - 4) / Math.max(data.length, 1), bw = Math.max(step / series.length - 1, 0.5);
    data.forEach(function (d, i) {
      series.forEach(function (s, j) {
        var v = d[s[0]] || 0, top = y(v, max);
        svg.appendChild(titled(el("rect", { "class": "bar bar-" + s[0], x: PAD + i * step + j * bw, y: top,
          width: bw, height: H - 18 - top, fill: s[1] }), label(d) + " " + s[0] + " " + v));
      });
    });
    return svg;
  }
  // lines with points: one per series, nulls left out
  function lines(data, series, label) {
    var max = Math.max.apply(null, [1].concat(data.map(function (d) {
      return Math.max.apply(null, series.map(function (s) { return d[s[0]] || 0; }));
    })));
    var svg = frame(max, data.length ? label(data[0]) : "", data.length ? label(data[data.length - 1]) : "");
    var step = (W - PAD - 10) / Math.max(data.length - 1, 1);
    series.forEach(function (s) {
      var pts = [];
      data.forEach(function (d, i) {
        var v = d[s[0]];
        if (v === null || v === undefined) return;
        var px = PAD + 3 + i * step, py = y(v, max);
        pts.push(px.toFixed(1) + "," + py.toFixed(1));
        svg.appendChild(titled(el("circle", { "class": "pt pt-" + s[0], cx: px, cy: py, r: 2.5, fill: s[1] }),
          label(d) + " " + s[0] + " " + v));
      });
      svg.appendChild(el("polyline", { points: pts.join(" "), fill: "none", stroke: s[1], "stroke-width": 1.2 }));
    });
    return svg;
  }

  function draw(c) {
    var hour = function (d) { return d.hour.slice(0, 13).replace("T", " "); };
    box("chart-rows", "Rows and rejects per hour", [["rows", "#2b8a3e"], ["rejects", "#e03131"]],
      bars(c.hours, [["rows", "#2b8a3e"], ["rejects", "#e03131"]], hour));
    box("chart-batches", "Writer batches, last hours: lag and landed → committed (s)",
      [["lag_s", "#1d4ed8"], ["latency_s", "#f59f00"]],
      c.batches.length ? lines(c.batches, [["lag_s", "#1d4ed8"], ["latency_s", "#f59f00"]],
        function (d) { return "batch " + d.batch_id + " " + d.committed_at.slice(11, 19); }) : null,
      "no batch committed in the last hours");
    box("chart-files", "Files per closed hour: written → now (after compaction)",
      [["written", "#a5c8f0"], ["files", "#1d4ed8"]],
      c.files.length ? bars(c.files, [["written", "#a5c8f0"], ["files", "#1d4ed8"]], hour) : null,
      "no closed hour in the range");
    box("chart-days", "Snapshots and metadata size (KB) per day", [["snapshots", "#7048e8"], ["metadata_kb", "#20c997"]],
      c.days.length ? lines(c.days.map(function (d) {
        return { day: d.day, snapshots: d.snapshots,
          metadata_kb: d.metadata_bytes === null ? null : Math.round(d.metadata_bytes / 1024) };
      }), [["snapshots", "#7048e8"], ["metadata_kb", "#20c997"]], function (d) { return d.day; }) : null,
      "no table yet");
  }
  function load() {
    var stream = $("stream") && $("stream").value;
    if (!stream) return;
    var params = new URLSearchParams();
    [["days", "days"], ["start", "start"], ["end", "end"]].forEach(function (p) {
      var input = $(p[0]), v = input && input.value.trim();
      if (v) params.set(p[1], v);
    });
    $("charts-status").textContent = "loading …";
    fetch("api/streams/" + encodeURIComponent(stream) + "/charts?" + params.toString(),
      { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (b) { if (!r.ok) throw new Error(r.status + ": " + b.detail); return b; });
      })
      .then(function (c) { draw(c); $("charts-status").textContent = c.start + " → " + c.end; })
      .catch(function (e) { $("charts-status").textContent = String(e.message || e); });
  }
  function main() {
    // the stream list is filled by the page's own script: start when it is there, follow its controls
    var tries = 0, wait = setInterval(function () {
      if (($("stream") && $("stream").value) || ++tries > 100) { clearInterval(wait); load(); }
    }, 100);
    ["stream", "days"].forEach(function (id) { if ($(id)) $(id).addEventListener("change", load); });
    if ($("refresh")) $("refresh").addEventListener("click", load);
  }
  return { main: main, load: load, draw: draw };
})();
