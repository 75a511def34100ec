/*
 * MemQ audit dashboard: plain JavaScript, no build step, no external requests.
 *
 * Reads the auditor's JSON API (/api/summary, /api/timeseries, /api/missing,
 * /api/anomalies, /api/lag) and renders the topic table, the consumer lag table, the
 * charts (uPlot, vendored) and the drill-down of the selected topic and group. Every string from the API goes into the
 * page as text (textContent / setAttribute), never as HTML.
 *
 * URL: ?refresh=<seconds> sets the auto-refresh period (default 5, at least 1);
 * #since=1h&topic=T&group=G keeps the window and the selection (bookmarkable).
 *
 * Test hooks: data-testid on the tables, rows, charts and the status line;
 * window.__memqLast holds the last JSON documents and error.
 */
(function () {
  "use strict";

  var WINDOWS = ["15m", "1h", "6h", "24h"];
  var CHART_HEIGHT = 220;
  var FETCH_TIMEOUT_MS = 15000;
  var TABLE_LIMIT = 500;
  var TOPIC_COLS = 14; // columns of the topic table (the empty row spans them all)
  var COLORS = {
    produced: "#0969da",
    consumed: "#1a7f37",
    missing: "#cf222e",
    pending: "#bf8700",
    p50: "#8250df",
    p99: "#d1242f",
  };

  var query = new URLSearchParams(window.location.search);
  var refreshSeconds = Math.min(3600, Math.max(1, Number(query.get("refresh")) || 5));

  var state = {
    since: "1h",
    selected: null, // {topic, group}; group "" for a topic nobody consumes
    timer: null,
    running: false,
    again: false,
    charts: {}, // container id -> {plot, sig}
    lastSuccessMs: null,
  };

  var last = {
    summary: null,
    timeseries: null,
    missing: null,
    anomalies: null,
    lag: null,
    lagError: null,
    error: null,
    refreshes: 0,
  };
  window.__memqLast = last;
  window.__memqChartCount = function () {
    return Object.keys(state.charts).length;
  };

  // --- small helpers --------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  /** An element with attributes (set as attributes, never parsed) and text/node children. */
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "class") node.className = v;
        else node.setAttribute(k, String(v));
      });
    }
    (children || []).forEach(function (c) {
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    });
    return node;
  }

  function fmtInt(n) {
    if (n === null || n === undefined) return "\u2014";
    var x = Number(n);
    return Number.isFinite(x) ? x.toLocaleString("en-US") : String(n);
  }

  function fmtMs(v) {
    if (v === null || v === undefined) return "\u2014";
    if (v < 1000) return Math.round(v) + " ms";
    return (v / 1000).toFixed(v < 10000 ? 2 : 1) + " s";
  }

  function isoUtc(ms) {
    if (ms === null || ms === undefined) return "\u2014";
    var d = new Date(Number(ms));
    return isNaN(d.getTime()) ? String(ms) : d.toISOString();
  }

  function clockUtc(ms) {
    return new Date(ms).toISOString().slice(11, 19) + " UTC";
  }

  function fmtSeconds(v) {
    if (v === null || v === undefined) return "\u2014";
    var x = Number(v);
    if (x < 60) return x.toFixed(1) + " s";
    if (x < 3600) return (x / 60).toFixed(1) + " min";
    return (x / 3600).toFixed(1) + " h";
  }

  function plural(n, word) {
    return fmtInt(n) + " " + word + (Number(n) === 1 ? "" : "s");
  }

  // JSON with u64 ids (producer_id, sequence) kept exact: numbers beyond 2^53 become the
  // digits of their source text (JSON.parse source access), or, on browsers without it,
  // the known u64 fields are quoted before parsing.
  var SOURCE_ACCESS = (function () {
    var ok = false;
    try {
      JSON.parse("1", function (k, v, ctx) {
        ok = !!(ctx && typeof ctx.source === "string");
        return v;
      });
    } catch (e) {
      ok = false;
    }
    return ok;
  })();

  function parseJson(text) {
    if (SOURCE_ACCESS) {
      return JSON.parse(text, function (k, v, ctx) {
        if (typeof v === "number" && !Number.isSafeInteger(v) && ctx && /^-?\d+$/.test(ctx.source)) {
          return ctx.source;
        }
        return v;
      });
    }
    return JSON.parse(text.replace(/"(producer_id|sequence)":(\s*)(\d{16,})/g, '"$1":$2"$3"'));
  }

  /** GET api/<name>?params -> parsed JSON; throws an Error that says what failed. */
  function api(name, params) {
    var url = new URL("api/" + name, document.baseURI);
    Object.keys(params || {}).forEach(function (k) {
      if (params[k] !== null && params[k] !== undefined) url.searchParams.set(k, params[k]);
    });
    var ctrl = new AbortController();
    var timer = setTimeout(function () {
      ctrl.abort();
    }, FETCH_TIMEOUT_MS);
    return fetch(url, { signal: ctrl.signal, cache: "no-store", headers: { Accept: "application/json" } })
      .then(
        function (resp) {
          return resp.text().then(function (text) {
            if (!resp.ok) {
              var msg = text;
              try {
                msg = parseJson(text).error || text;
              } catch (e) {
                /* not JSON: keep the text */
              }
              throw new Error("/api/" + name + " answered HTTP " + resp.status + ": " + String(msg).slice(0, 300));
            }
            try {
              return parseJson(text);
            } catch (e) {
              throw new Error("/api/" + name + " did not answer JSON: " + e.message);
            }
          });
        },
        function (err) {
          var why = err && err.name === "AbortError" ? "no answer within " + FETCH_TIMEOUT_MS / 1000 + " s" : String((err && err.message) || err);
          throw new Error("cannot reach the auditor API at " + url.origin + " (" + why + ")");
        }
      )
      .finally(function () {
        clearTimeout(timer);
      });
  }

  // --- URL state ------------------------------------------------------------------------

  function readHash() {
    var h = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    var since = h.get("since");
    if (since && WINDOWS.indexOf(since) >= 0) state.since = since;
    var topic = h.get("topic");
    if (topic) state.selected = { topic: topic, group: h.get("group") || "" };
  }

  function writeHash() {
    var h = new URLSearchParams();
    h.set("since", state.since);
    if (state.selected) {
      h.set("topic", state.selected.topic);
      h.set("group", state.selected.group);
    }
    history.replaceState(null, "", "#" + h.toString());
  }

  // --- status line ----------------------------------------------------------------------

  function setStatus(kind, text) {
    var line = $("status-line");
    line.dataset.state = kind;
    line.textContent = text;
  }

  function showError(err) {
    last.error = String((err && err.message) || err);
    var since = state.lastSuccessMs ? " (figures below are from " + clockUtc(state.lastSuccessMs) + ")" : "";
    setStatus("error", "Error: " + last.error + since);
  }

  // --- summary table --------------------------------------------------------------------

  function numCell(col, value, extra) {
    var attrs = { class: "num", "data-col": col, "data-value": value === null || value === undefined ? "" : value };
    if (extra) Object.keys(extra).forEach(function (k) { attrs[k] = extra[k]; });
    return el("td", attrs, [fmtInt(value)]);
  }

  function isSelected(topic, group) {
    var s = state.selected;
    return !!s && s.topic === topic && s.group === group;
  }

  function topicRow(t, g) {
    var group = g ? g.group : "";
    var status = g ? g.status : t.status;
    var cells = [
      el("td", { "data-col": "topic", "data-value": t.topic }, [t.topic]),
    ];
    if (g) {
      cells.push(el("td", { "data-col": "group", "data-value": group }, [group === "" ? "(no group id)" : group]));
      cells.push(numCell("produced", t.produced_records, { title: plural(t.produced_blocks, "block") }));
      cells.push(
        numCell("consumed", g.consumed_records, {
          title:
            plural(g.consumed_blocks, "block") +
            (g.unaudited_records ? "; plus " + plural(g.unaudited_records, "unaudited record") : ""),
        })
      );
      cells.push(
        numCell("missing", g.missing_records, {
          "data-blocks": g.missing_blocks,
          title: plural(g.missing_blocks, "block"),
          class: g.missing_records ? "num bad" : "num",
        })
      );
      cells.push(numCell("pending", g.pending_records, { title: plural(g.pending_blocks, "block") + " within the grace period" }));
      cells.push(numCell("expired", g.expired_records, { title: plural(g.expired_blocks, "block") + " never consumed, past the topic's retention.ms" }));
      cells.push(
        numCell("duplicates", g.duplicate_records, {
          "data-blocks": g.duplicate_blocks,
          title: plural(g.duplicate_blocks, "block") + " handed out more than once (extra records)",
        })
      );
      cells.push(
        numCell("dropped", g.dropped_duplicate_records, {
          "data-blocks": g.dropped_duplicate_blocks,
          title:
            fmtInt(g.dropped_duplicate_blocks) +
            (Number(g.dropped_duplicate_blocks) === 1 ? " copy" : " copies") +
            " of blocks already handed out, recognised and dropped by the consumer (records)",
        })
      );
      cells.push(
        numCell("mismatches", g.mismatches, {
          title: "blocks whose consumed content CRC differs",
          class: g.mismatches ? "num bad" : "num",
        })
      );
      cells.push(
        numCell("unaudited", g.unaudited_records, {
          "data-blocks": g.unaudited_blocks,
          title:
            plural(g.unaudited_blocks, "block") +
            " consumed with no produced audit record (their producer or broker does not report, or dropped its records)",
          class: g.unaudited_records ? "num warn" : "num",
        })
      );
      cells.push(el("td", { class: "num", "data-col": "p50", "data-value": g.latency_p50_ms === null ? "" : g.latency_p50_ms }, [fmtMs(g.latency_p50_ms)]));
      cells.push(el("td", { class: "num", "data-col": "p99", "data-value": g.latency_p99_ms === null ? "" : g.latency_p99_ms }, [fmtMs(g.latency_p99_ms)]));
    } else {
      cells.push(el("td", { "data-col": "group", "data-value": "", class: "no-consumers" }, ["no consumers"]));
      cells.push(numCell("produced", t.produced_records, { title: plural(t.produced_blocks, "block") }));
      ["consumed", "missing", "pending", "expired", "duplicates", "dropped", "mismatches", "unaudited", "p50", "p99"].forEach(function (c) {
        cells.push(el("td", { class: "num", "data-col": c, "data-value": "" }, ["\u2014"]));
      });
    }
    // A status other than ok says why, on the row itself (and in full on hover).
    var reason = g ? g.reason : null;
    var statusChildren = [el("span", { class: "status-word" }, [status])];
    if (reason) statusChildren.push(el("span", { class: "reason", "data-testid": "status-reason" }, [reason]));
    cells.push(
      el(
        "td",
        { class: "status status-" + status, "data-col": "status", "data-value": status, "data-reason": reason || "", title: reason },
        statusChildren
      )
    );
    var tr = el(
      "tr",
      {
        "data-testid": "topic-row",
        "data-topic": t.topic,
        "data-group": group,
        "data-status": status,
        tabindex: "0",
        "aria-selected": isSelected(t.topic, group) ? "true" : "false",
        class: isSelected(t.topic, group) ? "selected" : null,
      },
      cells
    );
    function pick() {
      select(t.topic, group);
    }
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        pick();
      }
    });
    return tr;
  }

  function rowsOf(summary) {
    var rows = [];
    summary.topics.forEach(function (t) {
      if (!t.groups.length) rows.push({ topic: t, group: null });
      else t.groups.forEach(function (g) { rows.push({ topic: t, group: g }); });
    });
    return rows;
  }

  function renderTopics(summary) {
    var rows = rowsOf(summary);
    var trs = rows.map(function (r) { return topicRow(r.topic, r.group); });
    if (!trs.length) {
      trs.push(
        el("tr", { "data-testid": "topic-empty" }, [
          el("td", { colspan: String(TOPIC_COLS), class: "empty" }, [
            "No audit records in this window yet (producers and consumers need audit.enable).",
          ]),
        ])
      );
    }
    $("topics-body").replaceChildren.apply($("topics-body"), trs);
    return rows;
  }

  function renderIngest(ing) {
    var node = $("ingest");
    if (!ing) {
      node.textContent = "ingest: unknown";
      return;
    }
    var total = Number(ing.produced_records || 0) + Number(ing.consumed_records || 0);
    var text =
      "ingested " + plural(total, "audit record") + " (" + fmtInt(ing.produced_records) + " produced, " +
      fmtInt(ing.consumed_records) + " consumed" + (ing.rejected_records ? ", " + fmtInt(ing.rejected_records) + " rejected" : "") + ")";
    var problem = null;
    if (ing.error) problem = "ingest error: " + ing.error;
    else if (ing.seconds_since_loop > 30) problem = "ingest stalled: no loop for " + Math.round(ing.seconds_since_loop) + " s";
    node.classList.toggle("error", !!problem);
    node.dataset.error = problem ? "true" : "false";
    node.textContent = problem ? problem + " \u2014 " + text : text;
    return problem;
  }

  /** Keep a valid selection: the current one if still listed, else the worst row. */
  function ensureSelection(rows) {
    if (!rows.length) {
      state.selected = state.selected && state.selected.topic ? state.selected : null;
      return;
    }
    var found = state.selected && rows.some(function (r) {
      return r.topic.topic === state.selected.topic && (r.group ? r.group.group : "") === state.selected.group;
    });
    if (found) return;
    var pick = rows.find(function (r) { return r.group && r.group.status === "missing"; }) || rows[0];
    state.selected = { topic: pick.topic.topic, group: pick.group ? pick.group.group : "" };
    writeHash();
    markSelected();
  }

  function markSelected() {
    document.querySelectorAll("#topics-body tr[data-testid=topic-row]").forEach(function (tr) {
      var on = isSelected(tr.getAttribute("data-topic"), tr.getAttribute("data-group"));
      tr.classList.toggle("selected", on);
      tr.setAttribute("aria-selected", on ? "true" : "false");
    });
  }

  function select(topic, group) {
    state.selected = { topic: topic, group: group };
    writeHash();
    markSelected();
    refresh();
  }

  // --- charts ---------------------------------------------------------------------------

  // The time axis: labels are UTC "HH:MM" (the date, MM-DD, under the first one and under
  // each that starts a day), ticks at least X_TICK_SPACE CSS px apart: twice a label's
  // width, so labels stay apart at any chart width and window, whatever the platform's
  // system-ui font (uPlot's defaults, "6:10am" labels every 50 px or more, leave gaps of
  // 4 px with DejaVu Sans: a slightly wider font makes them overlap).
  var X_TICK_SPACE = 72;

  function two(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function xTickLabels(u, splits, axisIdx, space, incr) {
    var prevDay = null;
    return splits.map(function (sec) {
      var d = new Date(sec * 1000);
      var day = two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate());
      if (incr >= 86400) return day;
      var label = two(d.getUTCHours()) + ":" + two(d.getUTCMinutes());
      if (day !== prevDay) label += "\n" + day;
      prevDay = day;
      return label;
    });
  }

  /** Test hook: the time axis of chart ``id`` as last drawn: its scale, the data's x
   * range, the plot width, and each tick label with its left and right edge (CSS px). */
  window.__memqXLabels = function (id) {
    var c = state.charts[id];
    if (!c) return null;
    var u = c.plot;
    var axis = u.axes[0];
    var ctx = document.createElement("canvas").getContext("2d");
    ctx.font = axis.font[0];
    var ratio = window.devicePixelRatio || 1;
    var xs = u.data[0];
    var labels = (axis._splits || []).map(function (v, i) {
      var text = String(axis._values[i]);
      var w = Math.max.apply(null, text.split("\n").map(function (line) {
        return ctx.measureText(line).width / ratio;
      }));
      var x = u.valToPos(v, "x");
      return { value: v, text: text, left: x - w / 2, right: x + w / 2 };
    });
    return {
      scale: [u.scales.x.min, u.scales.x.max],
      data: [xs[0], xs[xs.length - 1]],
      width: u.width,
      labels: labels,
    };
  };

  function yRange(u, min, max) {
    var hi = max === null || max === undefined || !isFinite(max) || max <= 0 ? 1 : max * 1.1;
    return [0, hi];
  }

  function chartWidth(box) {
    return Math.max(240, Math.floor(box.clientWidth || box.getBoundingClientRect().width || 480));
  }

  /** Create the chart in ``id`` or update it in place (same series: setData, no new instance). */
  function upsertChart(id, yLabel, series, data) {
    var box = $(id);
    var sig = series.map(function (s) { return s.label; }).join("|");
    var c = state.charts[id];
    if (c && c.sig !== sig) {
      c.plot.destroy();
      delete state.charts[id];
      c = null;
    }
    if (!c) {
      var opts = {
        width: chartWidth(box),
        height: CHART_HEIGHT,
        tzDate: function (ts) {
          return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
        },
        scales: { x: { time: true }, y: { range: yRange } },
        axes: [{ space: X_TICK_SPACE, values: xTickLabels }, { label: yLabel, size: 64 }],
        series: [{ label: "minute (UTC)" }].concat(
          series.map(function (s) {
            return {
              label: s.label,
              stroke: s.color,
              width: s.width || 1.5,
              dash: s.dash,
              fill: s.fill,
              spanGaps: false,
              // A lone minute between gaps (latency) has no line: draw its point.
              points: s.points ? { show: true, size: 5 } : {},
              value: s.value,
            };
          })
        ),
      };
      box.replaceChildren();
      c = state.charts[id] = { plot: new uPlot(opts, data, box), sig: sig };
    } else {
      c.plot.setData(data);
    }
    box.dataset.rendered = "true";
    box.dataset.points = String(data[0].length);
  }

  function resizeCharts() {
    Object.keys(state.charts).forEach(function (id) {
      var box = $(id);
      var plot = state.charts[id].plot;
      var w = chartWidth(box);
      if (Math.abs(plot.width - w) > 1) plot.setSize({ width: w, height: CHART_HEIGHT });
    });
  }

  var resizeQueued = false;
  function queueResize() {
    if (resizeQueued) return;
    resizeQueued = true;
    requestAnimationFrame(function () {
      resizeQueued = false;
      resizeCharts();
    });
  }

  function renderCharts(ts, group) {
    var g = (group !== "" && ts.groups && ts.groups[group]) || null;
    var n = ts.minutes.length;
    var none = new Array(n).fill(null);
    var x = ts.minutes.map(function (m) { return m / 1000; });
    var latencyValue = function (u, v) { return v === null || v === undefined ? "--" : fmtMs(v); };
    upsertChart(
      "chart-throughput",
      "records / min",
      [
        { label: "produced", color: COLORS.produced, width: 2, fill: "rgba(9,105,218,0.08)" },
        { label: "consumed", color: COLORS.consumed, width: 2, dash: [6, 4] },
      ],
      [x, ts.produced, g ? g.consumed : none]
    );
    upsertChart(
      "chart-missing",
      "records",
      [
        { label: "missing", color: COLORS.missing, width: 2, fill: "rgba(207,34,46,0.12)" },
        { label: "pending", color: COLORS.pending, width: 1.5 },
      ],
      [x, g ? g.missing : none, g ? g.pending : none]
    );
    upsertChart(
      "chart-latency",
      "ms",
      [
        { label: "p50", color: COLORS.p50, width: 1.5, value: latencyValue, points: true },
        { label: "p99", color: COLORS.p99, width: 1.5, value: latencyValue, points: true },
      ],
      [x, g ? g.latency_p50_ms : none, g ? g.latency_p99_ms : none]
    );
  }

  // --- drill-down tables ----------------------------------------------------------------

  function emptyRow(cols, text, testid) {
    return el("tr", { "data-testid": testid }, [el("td", { colspan: String(cols), class: "empty" }, [text])]);
  }

  function renderMissing(doc, group) {
    var body = $("missing-body");
    if (group === "") {
      body.replaceChildren(emptyRow(6, "Nobody consumes this topic: no group to compare with.", "missing-empty"));
      $("missing-count").textContent = "";
      return;
    }
    var blocks = doc.blocks || [];
    var records = blocks.reduce(function (a, b) { return a + Number(b.records || 0); }, 0);
    $("missing-count").textContent =
      "(" + plural(blocks.length, "block") + ", " + plural(records, "record") + (blocks.length >= TABLE_LIMIT ? "; first " + TABLE_LIMIT + " shown" : "") + ")";
    if (!blocks.length) {
      body.replaceChildren(emptyRow(6, "No missing blocks in this window.", "missing-empty"));
      return;
    }
    var rows = blocks.map(function (b) {
      return el(
        "tr",
        {
          "data-testid": "missing-row",
          "data-object-key": b.object_key || "",
          "data-producer-id": String(b.producer_id),
          "data-sequence": String(b.sequence),
          "data-records": b.records,
        },
        [
          el("td", { "data-col": "producer_id", class: "key" }, [String(b.producer_id)]),
          el("td", { "data-col": "epoch", class: "num" }, [String(b.epoch)]),
          el("td", { "data-col": "sequence", class: "num" }, [String(b.sequence)]),
          el("td", { "data-col": "records", class: "num", "data-value": b.records }, [fmtInt(b.records)]),
          el("td", { "data-col": "acked", "data-value": b.acked_ms }, [isoUtc(b.acked_ms)]),
          el("td", { "data-col": "object_key", class: "key", title: b.bucket ? "bucket " + b.bucket : null }, [b.object_key || "(unknown: acks < all)"]),
        ]
      );
    });
    body.replaceChildren.apply(body, rows);
  }

  function renderAnomalies(doc, group) {
    var body = $("anomalies-body");
    if (group === "") {
      body.replaceChildren(emptyRow(8, "Nobody consumes this topic.", "anomalies-empty"));
      $("anomalies-count").textContent = "";
      return;
    }
    var blocks = doc.blocks || [];
    $("anomalies-count").textContent = "(" + plural(blocks.length, "block") + (blocks.length >= TABLE_LIMIT ? "; first " + TABLE_LIMIT + " shown" : "") + ")";
    if (!blocks.length) {
      body.replaceChildren(emptyRow(8, "No duplicated or mismatched blocks in this window.", "anomalies-empty"));
      return;
    }
    var rows = blocks.map(function (b) {
      return el(
        "tr",
        { "data-testid": "anomaly-row", "data-kind": b.kind, "data-object-key": b.object_key || "" },
        [
          el("td", { "data-col": "kind", class: b.kind === "mismatch" ? "bad" : null }, [b.kind]),
          el("td", { "data-col": "producer_id", class: "key" }, [String(b.producer_id)]),
          el("td", { "data-col": "epoch", class: "num" }, [String(b.epoch)]),
          el("td", { "data-col": "sequence", class: "num" }, [String(b.sequence)]),
          el("td", { "data-col": "produced_records", class: "num" }, [fmtInt(b.produced_records)]),
          el("td", { "data-col": "consumed_records", class: "num" }, [fmtInt(b.consumed_records)]),
          el("td", { "data-col": "times", class: "num" }, [fmtInt(b.times)]),
          el("td", { "data-col": "object_key", class: "key" }, [b.object_key || "\u2014"]),
        ]
      );
    });
    body.replaceChildren.apply(body, rows);
  }

  function renderDetailHeader(sel) {
    $("detail").hidden = false;
    $("detail-topic").textContent = sel.topic;
    $("detail-group").textContent = sel.group;
    $("detail-group-wrap").hidden = sel.group === "";
  }

  // --- consumer lag ---------------------------------------------------------------------

  var LAG_COLS = 8;

  function lagRow(g) {
    var parts = (g.partitions || []).map(function (p) {
      return "partition " + p.partition + ": committed " + (p.committed === null ? "none" : fmtInt(p.committed)) + ", end " + fmtInt(p.end);
    });
    var offsets = parts.join("; ");
    return el(
      "tr",
      {
        "data-testid": "lag-row",
        "data-group": g.group,
        "data-topic": g.topic,
        class: Number(g.lag_objects) > 0 ? "lagging" : null,
      },
      [
        el("td", { "data-col": "group", "data-value": g.group }, [g.group]),
        el("td", { "data-col": "topic", "data-value": g.topic }, [g.topic]),
        el("td", { "data-col": "state", "data-value": g.state }, [g.state]),
        numCell("lag_objects", g.lag_objects),
        el(
          "td",
          {
            class: "num",
            "data-col": "lag_records",
            "data-value": g.lag_records,
            title: g.records_estimated ? "estimated from the first pending objects" : null,
          },
          [(g.records_estimated ? "\u2248 " : "") + fmtInt(g.lag_records)]
        ),
        el("td", { class: "num", "data-col": "lag_seconds", "data-value": g.lag_seconds === null ? "" : g.lag_seconds }, [fmtSeconds(g.lag_seconds)]),
        numCell("committed", g.committed, { title: offsets }),
        numCell("end", g.end, { title: offsets }),
      ]
    );
  }

  function setLagStatus(kind, text) {
    var node = $("lag-status");
    node.dataset.state = kind;
    node.textContent = text;
  }

  /** The lag table from /api/lag: rows, or the empty, not-configured or error state. */
  function renderLag(doc) {
    last.lag = doc;
    last.lagError = null;
    var groups = doc.groups || [];
    var kind;
    if (!doc.enabled) {
      kind = "disabled";
      setLagStatus(kind, doc.error || "Consumer lag is not measured.");
    } else if (doc.error) {
      kind = "error";
      setLagStatus(
        kind,
        "Measuring lag failed: " + doc.error + (doc.hint ? " \u2014 " + doc.hint : "") +
          (doc.measured_ms ? " (rows are from " + clockUtc(doc.measured_ms) + ")" : "")
      );
    } else if (doc.measured_ms === null || doc.measured_ms === undefined) {
      kind = "loading";
      setLagStatus(kind, "Waiting for the first measurement\u2026");
    } else {
      kind = "ok";
      setLagStatus(kind, "Measured at " + clockUtc(doc.measured_ms) + ", every " + doc.interval_s + " s.");
    }
    var rows = groups.map(lagRow);
    if (!rows.length) {
      if (kind === "ok") rows.push(emptyRow(LAG_COLS, "No consumer group has committed offsets on these topics.", "lag-empty"));
      else rows.push(emptyRow(LAG_COLS, kind === "loading" ? "Measuring\u2026" : "No lag figures (see above).", "lag-none"));
    }
    $("lag-body").replaceChildren.apply($("lag-body"), rows);
  }

  function renderLagFailure(err) {
    last.lagError = String((err && err.message) || err);
    setLagStatus("error", "Error: " + last.lagError);
  }

  // --- refresh --------------------------------------------------------------------------

  function summaryText(summary, rows, ingestProblem) {
    var groups = rows.filter(function (r) { return r.group; }).length;
    var bad = rows.filter(function (r) { return r.group && r.group.status === "missing"; }).length;
    var warn = rows.filter(function (r) { return r.group && r.group.status === "warn"; }).length;
    var parts = [
      plural(summary.topics.length, "topic") + ", " + plural(groups, "group") + " in the last " + state.since,
      bad ? plural(bad, "group") + " with missing or mismatched blocks" : "no missing blocks",
    ];
    if (warn) parts.push(plural(warn, "group") + " with duplicates or unaudited blocks");
    parts.push("grace period " + summary.grace_period_s + " s");
    if (ingestProblem) parts.unshift(ingestProblem);
    return parts.join(" \u00b7 ");
  }

  function refreshOnce() {
    var lag = api("lag").then(renderLag, renderLagFailure); // never rejects: its own state
    return Promise.all([refreshFigures(), lag]);
  }

  function refreshFigures() {
    var since = state.since;
    return api("summary", { since: since }).then(function (summary) {
      if (since !== state.since) return null; // the window changed meanwhile: a new round follows
      last.summary = summary;
      var ingestProblem = renderIngest(summary.ingest);
      var rows = renderTopics(summary);
      ensureSelection(rows);
      var sel = state.selected;
      var done = function () {
        state.lastSuccessMs = Date.now();
        last.error = null;
        last.refreshes += 1;
        var updated = $("last-updated");
        updated.textContent = clockUtc(state.lastSuccessMs);
        updated.setAttribute("datetime", new Date(state.lastSuccessMs).toISOString());
        setStatus(ingestProblem ? "degraded" : "ok", summaryText(summary, rows, ingestProblem));
      };
      if (!sel) {
        $("detail").hidden = true;
        done();
        return null;
      }
      var base = { topic: sel.topic, since: since };
      var withGroup = { topic: sel.topic, since: since, group: sel.group, limit: TABLE_LIMIT };
      var empty = Promise.resolve({ blocks: [] });
      return Promise.all([
        api("timeseries", sel.group === "" ? base : { topic: sel.topic, since: since, group: sel.group }),
        sel.group === "" ? empty : api("missing", withGroup),
        sel.group === "" ? empty : api("anomalies", withGroup),
      ]).then(function (docs) {
        if (sel !== state.selected || since !== state.since) return null; // superseded
        last.timeseries = docs[0];
        last.missing = docs[1];
        last.anomalies = docs[2];
        renderDetailHeader(sel);
        renderCharts(docs[0], sel.group);
        renderMissing(docs[1], sel.group);
        renderAnomalies(docs[2], sel.group);
        done();
        return null;
      });
    });
  }

  /** One refresh at a time; a request during one runs once more right after it. */
  function refresh() {
    if (state.running) {
      state.again = true;
      return;
    }
    state.running = true;
    state.again = false;
    refreshOnce()
      .catch(function (err) {
        showError(err);
        if (window.console) console.warn("memq audit dashboard:", err);
      })
      .finally(function () {
        state.running = false;
        if (state.again) refresh();
      });
  }

  function setAutoRefresh(on) {
    if (state.timer !== null) {
      clearInterval(state.timer);
      state.timer = null;
    }
    if (on) state.timer = setInterval(refresh, refreshSeconds * 1000);
  }

  // --- start ----------------------------------------------------------------------------

  function start() {
    if (typeof window.uPlot !== "function") {
      setStatus("error", "Error: the chart library (static/vendor/uPlot.iife.min.js) did not load");
      return;
    }
    readHash();
    $("refresh-every").textContent = String(refreshSeconds);
    var sel = $("window");
    sel.value = state.since;
    sel.addEventListener("change", function () {
      state.since = WINDOWS.indexOf(sel.value) >= 0 ? sel.value : "1h";
      writeHash();
      refresh();
    });
    var auto = $("auto-refresh");
    auto.addEventListener("change", function () {
      setAutoRefresh(auto.checked);
      if (auto.checked) refresh();
    });
    $("refresh-now").addEventListener("click", refresh);
    if (typeof ResizeObserver === "function") {
      var ro = new ResizeObserver(queueResize);
      ["chart-throughput", "chart-missing", "chart-latency"].forEach(function (id) {
        ro.observe($(id));
      });
    } else {
      window.addEventListener("resize", queueResize);
    }
    setAutoRefresh(auto.checked);
    refresh();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
