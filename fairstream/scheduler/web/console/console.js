// fairstream console: polls /tenants and draws it. Plain JavaScript, no build step, no library.
// Every text that comes from the scheduler (tenant ids above all) goes in through
// textContent, never as HTML. Fields a scheduler does not report show as "-".
(function () {
  "use strict";

  var POLL_MS = 2000;
  var SPAN_MS = 5 * 60 * 1000; // what the charts show
  var OTHER = "__other__";
  var PALETTE = ["#2f6fdb", "#e4572e", "#29a36a", "#9b59b6", "#f0a202", "#17becf",
                 "#d62a7b", "#6b8e23", "#8c564b", "#3d5a80"];

  var state = { samples: [], lastT: 0, colors: {}, next: 0, polls: 0, errors: 0, data: null,
                folded: {}, tree: null };
  window.fairstreamConsole = state; // for people and tests poking at the page

  // -- formatting ------------------------------------------------------------------------

  function has(x) { return x !== null && x !== undefined && !(typeof x === "number" && isNaN(x)); }
  function num(x, digits) { return has(x) ? Number(x).toLocaleString("en-US", { maximumFractionDigits: digits || 0 }) : "-"; }
  function pct(x) { return has(x) ? (100 * x).toFixed(x < 0.1 ? 1 : 0) + "%" : "-"; }
  function secs(x) {
    if (!has(x)) return "-";
    if (x < 1) return (1000 * x).toFixed(x < 0.01 ? 1 : 0) + " ms";
    return x.toFixed(x < 10 ? 2 : 1) + " s";
  }
  function rate(x) { return has(x) ? x.toFixed(x < 10 ? 1 : 0) : "-"; }

  function $(id) { return document.getElementById(id); }
  function text(id, value) { $(id).textContent = value; }
  function cell(tr, value, cls) {
    var td = document.createElement("td");
    td.textContent = value;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  function colorOf(tenant) {
    if (tenant === OTHER) return "#9aa3b2";
    if (!state.colors[tenant]) state.colors[tenant] = PALETTE[state.next++ % PALETTE.length];
    return state.colors[tenant];
  }

  // -- summary, tenants, group -----------------------------------------------------------

  function renderSummary(d) {
    var badge = $("status");
    badge.textContent = d.ready ? "ready" : "not ready";
    badge.className = "badge " + (d.ready ? "ok" : "bad");
    text("app-id", has(d.app_id) ? "group " + d.app_id : "");
    text("updated", "updated " + new Date().toLocaleTimeString());
    text("egress-rate", has(d.egress_rate) ? rate(d.egress_rate) + "/s" : "-");
    var limit = has(d.rate_limit) ? "limit " + num(d.rate_limit, 1) + "/s (this instance)" : "no rate limit";
    if (d.adaptive && has(d.adaptive.rate)) {
      // The workers' 429s set the pace: the adapted group rate, between its floor and ceiling.
      limit += "; adapted to " + num(d.adaptive.rate, 1) + "/s of " + num(d.adaptive.ceiling, 1) + "/s";
      if (d.adaptive.held_for_s > 0) limit += ", held " + secs(d.adaptive.held_for_s);
    }
    text("egress-limit", limit);
    text("backlog", num(d.backlog));
    // Records of tenants far behind wait in the ingest log, read again nearer their turn.
    text("backlog-sub", d.in_log > 0 ? "records buffered; " + num(d.in_log) +
      " more wait in the ingest log" : "records buffered");
    var f = d.fairness;
    if (!f) {
      text("jain", "-"); text("jain-sub", "first window not closed yet");
      text("shortfall", "-"); text("shortfall-sub", "");
    } else if (!has(f.jain)) {
      text("jain", "-");
      text("jain-sub", "no tenant backlogged through the last " + num(f.window_seconds) + " s");
      text("shortfall", "0%"); text("shortfall-sub", "nobody waited for a share");
    } else {
      // With tenant groups the verdict is over the groups and ungrouped tenants (the outer
      // level); `members` is the group whose members were split least fairly.
      var grouped = "members" in f;
      text("jain", f.jain.toFixed(3));
      var sub = f.backlogged_tenants + (grouped ? " backlogged groups and tenants" : " backlogged tenants") +
        ", last " + num(f.window_seconds) + " s";
      if (f.members) sub += "; within " + f.members.group + ": " + f.members.jain.toFixed(3);
      text("jain-sub", sub);
      text("shortfall", pct(f.shortfall));
      text("shortfall-sub", f.worst_tenant ? f.worst_tenant + " (" + num(f.shortfall_records, 1) + " records)" : "every tenant got its share");
    }
  }

  function shareBar(row) {
    var bar = document.createElement("div");
    bar.className = "bar";
    // Against the entitlement: the tenant's part of what its class's backlogged tenants got
    // (what quiet tenants took is theirs by right); for the others, their part of egress.
    var share = has(row.backlogged_share) ? row.backlogged_share : row.share;
    if (has(share)) {
      var fill = document.createElement("div");
      var short = has(row.entitlement) && share < 0.9 * row.entitlement;
      fill.className = "fill" + (short ? " short" : "");
      fill.style.width = Math.min(100, 100 * share) + "%";
      bar.appendChild(fill);
    }
    if (has(row.entitlement)) {
      var mark = document.createElement("div");
      mark.className = "mark";
      mark.style.left = Math.min(100, 100 * row.entitlement) + "%";
      mark.title = "entitled " + pct(row.entitlement);
      bar.appendChild(mark);
    }
    bar.title = "share " + pct(share) + ", entitled " + pct(row.entitlement);
    return bar;
  }

  function tenantCells(tr, r) {
    cell(tr, r.state || (r.paused ? "paused" : r.backlog || r.in_log ? "backlogged" : "idle"),
         "state-" + (r.state || "idle"));
    cell(tr, has(r.priority) ? String(r.priority) : "-", "num");
    cell(tr, has(r.weight) ? String(r.weight) : "-", "num");
    // In memory, and (a tenant far behind) what waits for it in the ingest log.
    cell(tr, num(r.backlog) + (r.in_log > 0 ? " + " + num(r.in_log) + " in log" : ""), "num")
      .title = r.in_log > 0 ? num(r.backlog) + " in memory, " + num(r.in_log) +
        " waiting in the ingest log" : "records in memory";
    cell(tr, rate(r.rate), "num");
    cell(tr, pct(r.share), "num");
    cell(tr, pct(r.backlogged_share), "num");
    cell(tr, pct(r.entitlement), "num");
    cell(tr, "").appendChild(shareBar(r));
    cell(tr, secs(r.dwell_p50), "num");
    cell(tr, secs(r.dwell_p99), "num");
    // What the workers measured against what the records declared (with feedback on).
    cell(tr, has(r.cost_declared) && r.cost_declared > 0 && has(r.cost_reported)
      ? (r.cost_reported / r.cost_declared).toFixed(2) + "x" : "-", "num")
      .title = has(r.cost_declared) ? num(r.cost_reported) + " measured / " +
        num(r.cost_declared) + " declared" : "no feedback for this tenant";
    // Its budget with the least room left (its own, or its tenant group's), and the rest in
    // the cell's title.
    var budgets = r.budgets || [];
    var tight = null;
    budgets.forEach(function (b) {
      if (!tight || b.remaining / Math.max(1, b.limit) < tight.remaining / Math.max(1, tight.limit)) {
        tight = b;
      }
    });
    var text = tight ? num(tight.spent) + "/" + tight.budget +
      (tight.scope !== r.tenant ? " (" + tight.scope + ")" : "") +
      (r.budget_waiting ? ", waiting" : "") : "-";
    cell(tr, text, r.budget_waiting ? "state-paused" : "").title = budgets.map(function (b) {
      return b.scope + " " + b.budget + ": " + num(b.spent) + " spent, " + num(b.remaining) +
        " left, resets " + new Date(b.resets_at_ms).toISOString();
    }).join("\n") || "no budget";
  }

  function busiest(a, b) {
    var an = a.tenant || a.group, bn = b.tenant || b.group;
    return (b.rate || 0) - (a.rate || 0) || (b.backlog || 0) - (a.backlog || 0) ||
      (an < bn ? -1 : 1);
  }

  // With tenant groups, the table is their tree: a row per group (its share of the egress
  // against its entitlement among the groups and ungrouped tenants), its members indented
  // under it (their share of the group's egress against their entitlement within it; a
  // click on the group folds them), and the ungrouped tenants at the top level beside.
  function tenantTree(d) {
    var byTenant = {};
    (d.tenants || []).forEach(function (r) { byTenant[r.tenant] = r; });
    var top = (d.groups || []).map(function (g) { return { group: g, rate: g.rate, backlog: g.backlog }; });
    (d.tenants || []).forEach(function (r) {
      if (!has(r.group)) top.push({ tenant: r.tenant, row: r, rate: r.rate, backlog: r.backlog });
    });
    top.sort(function (a, b) {
      return busiest(a.group || a.row, b.group || b.row);
    });
    return { top: top, byTenant: byTenant };
  }

  function groupRow(body, g) {
    var tr = document.createElement("tr");
    var open = !state.folded[g.group];
    tr.className = "group-row";
    tr.dataset.group = g.group;
    var name = cell(tr, "", "tenant");
    var toggle = document.createElement("span");
    toggle.className = "toggle";
    toggle.textContent = open ? "\u25be " : "\u25b8 ";
    name.appendChild(toggle);
    name.appendChild(document.createTextNode(g.group));
    var count = document.createElement("span");
    count.className = "muted";
    count.textContent = " group, " + g.members_listed + (g.members_listed === 1 ? " member" : " members");
    name.appendChild(count);
    tenantCells(tr, g);
    tr.addEventListener("click", function () {
      state.folded[g.group] = open;
      if (state.data) renderTenants(state.data);
    });
    body.appendChild(tr);
    if (!open) return 0;
    var members = (g.members || []).slice();
    members.sort(busiest);
    members.forEach(function (m) {
      var row = {};
      var seen = state.tree.byTenant[m.tenant] || {};
      Object.keys(seen).forEach(function (k) { row[k] = seen[k]; });
      // Within the group: its share of the group's egress, its entitlement there.
      ["state", "weight", "priority", "backlog", "rate", "share", "entitlement",
       "backlogged_share"].forEach(function (k) { row[k] = m[k]; });
      var mr = document.createElement("tr");
      mr.className = "member";
      mr.dataset.tenant = m.tenant;
      mr.dataset.group = g.group;
      cell(mr, m.tenant, "tenant");
      tenantCells(mr, row);
      body.appendChild(mr);
    });
    return members.length;
  }

  function renderTenants(d) {
    var body = document.createElement("tbody");
    var count = 0;
    if (Array.isArray(d.groups)) {
      state.tree = tenantTree(d);
      state.tree.top.forEach(function (entry) {
        if (entry.group) {
          count += 1 + groupRow(body, entry.group);
          return;
        }
        var tr = document.createElement("tr");
        tr.dataset.tenant = entry.tenant;
        cell(tr, entry.tenant, "tenant");
        tenantCells(tr, entry.row);
        body.appendChild(tr);
        count++;
      });
    } else {
      var rows = (d.tenants || []).slice();
      rows.sort(busiest);
      rows.forEach(function (r) {
        var tr = document.createElement("tr");
        tr.dataset.tenant = r.tenant;
        cell(tr, r.tenant, "tenant");
        tenantCells(tr, r);
        body.appendChild(tr);
      });
      count = rows.length;
    }
    var table = $("tenants");
    table.replaceChild(body, table.tBodies[0]);
    table.dataset.rows = String(count);
    $("tree-note").hidden = !Array.isArray(d.groups);
  }

  function renderGroup(d) {
    // A scheduler sharing the rate by demand lists the group's live instances (`instances`);
    // otherwise it is shown as the one instance it is. This instance's own row gets its
    // readiness, backlog and egress; the others' come from their consoles.
    var listed = Array.isArray(d.instances) ? d.instances
      : (d.group && Array.isArray(d.group.instances) ? d.group.instances : null);
    var mine = {
      instance: d.group_instance_id || "this instance", self: true, ready: d.ready,
      partitions: d.partitions, rate_share: d.rate_limit, backlog: d.backlog,
      egress_rate: d.egress_rate,
    };
    var instances = listed ? listed.map(function (i) {
      if (!i.self) return i;
      var row = {};
      Object.keys(mine).forEach(function (k) { row[k] = mine[k]; });
      Object.keys(i).forEach(function (k) { if (has(i[k])) row[k] = i[k]; });
      return row;
    }) : [mine];
    var body = document.createElement("tbody");
    instances.forEach(function (i) {
      var tr = document.createElement("tr");
      var parts = Array.isArray(i.partitions) ? i.partitions : null;
      cell(tr, (i.instance || i.id || "-") + (i.self && listed ? " (this one)" : ""));
      cell(tr, has(i.ready) ? (i.ready ? "yes" : "no") : "-");
      cell(tr, parts ? String(parts.length) : num(i.partitions), "num");
      cell(tr, parts ? parts.join(", ") : "-");
      var share = has(i.rate_share) ? i.rate_share : i.rate_limit;
      cell(tr, has(share) ? num(share, 1) + "/s" : "unlimited", "num");
      var demand = has(i.demand_weight) ? i.demand_weight : i.demand;
      cell(tr, has(demand) ? num(demand, 2) : "-", "num");
      cell(tr, num(i.backlog), "num");
      cell(tr, has(i.egress_rate) ? rate(i.egress_rate) : "-", "num");
      cell(tr, has(i.report_age_s) ? secs(i.report_age_s) : "-", "num");
      body.appendChild(tr);
    });
    var table = $("group");
    table.replaceChild(body, table.tBodies[0]);
    table.dataset.rows = String(instances.length);
    var note = "group " + (d.app_id || "?") + ": " + instances.length +
      (instances.length === 1 ? " instance" : " instances");
    if (d.share_by === "demand") {
      note += "; the rate is shared by demand (backlogged weight of each instance's tenants).";
    } else if (d.share_by === "partitions") {
      note += "; the rate is shared by assigned partitions.";
    }
    if (!listed) {
      note += " Only this instance is known here: open each instance's console, or run " +
        "fairstream top with every instance, for the rest of the group.";
    }
    text("group-note", note);
  }

  // -- charts ----------------------------------------------------------------------------

  function setupCanvas(canvas) {
    var ratio = window.devicePixelRatio || 1;
    var w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio);
      canvas.height = Math.round(h * ratio);
    }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    return { ctx: ctx, w: w, h: h, left: 48, right: 8, top: 8, bottom: 22 };
  }

  function niceStep(max, ticks) {
    var raw = max / ticks, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10 * mag;
  }

  function timeAxis(c, t0, t1) {
    var ctx = c.ctx, plotW = c.w - c.left - c.right;
    ctx.fillStyle = "#687084";
    for (var m = 0; m <= 5; m++) {
      var t = t1 - m * 60000;
      if (t < t0) break;
      var x = c.left + plotW * (t - t0) / (t1 - t0);
      ctx.textAlign = m === 0 ? "right" : "center";
      ctx.fillText(m === 0 ? "now" : "-" + m + " min", x, c.h - 6);
    }
  }

  function frame(c) {
    var ctx = c.ctx;
    ctx.strokeStyle = "#dfe3ea";
    ctx.strokeRect(c.left, c.top, c.w - c.left - c.right, c.h - c.top - c.bottom);
  }

  // Chart series: the tenants with the most egress over the samples shown, the rest in OTHER.
  function seriesOf(samples) {
    var totals = {};
    samples.forEach(function (s) {
      Object.keys(s.rate || {}).forEach(function (t) { totals[t] = (totals[t] || 0) + s.rate[t]; });
    });
    var names = Object.keys(totals).filter(function (t) { return t !== OTHER; });
    names.sort(function (a, b) { return totals[b] - totals[a] || (a < b ? -1 : 1); });
    var shown = names.slice(0, PALETTE.length);
    if (names.length > shown.length || totals[OTHER]) shown.push(OTHER);
    return shown;
  }

  function drawEgress(samples, names, t0, t1) {
    var canvas = $("egress-chart"), c = setupCanvas(canvas), ctx = c.ctx;
    var plotW = c.w - c.left - c.right, plotH = c.h - c.top - c.bottom;
    var stacks = samples.map(function (s) {
      var acc = 0, row = {}, shownSum = 0;
      names.forEach(function (t) { if (t !== OTHER) shownSum += (s.rate || {})[t] || 0; });
      var total = 0;
      Object.keys(s.rate || {}).forEach(function (t) { total += s.rate[t]; });
      names.forEach(function (t) {
        var v = t === OTHER ? Math.max(0, total - shownSum) : ((s.rate || {})[t] || 0);
        row[t] = [acc, acc + v];
        acc += v;
      });
      return { t: s.t, row: row, top: acc };
    });
    var max = 1;
    stacks.forEach(function (s) { max = Math.max(max, s.top); });
    var step = niceStep(max, 4);
    max = Math.ceil(max / step) * step;
    function x(t) { return c.left + plotW * (t - t0) / (t1 - t0); }
    function y(v) { return c.top + plotH * (1 - v / max); }
    ctx.textAlign = "right";
    for (var v = 0; v <= max + 1e-9; v += step) {
      ctx.strokeStyle = "#eef1f5";
      ctx.beginPath(); ctx.moveTo(c.left, y(v)); ctx.lineTo(c.w - c.right, y(v)); ctx.stroke();
      ctx.fillStyle = "#687084";
      ctx.fillText(String(Math.round(v * 10) / 10), c.left - 4, y(v) + 4);
    }
    if (stacks.length > 1) {
      names.slice().reverse().forEach(function (t) {
        ctx.beginPath();
        stacks.forEach(function (s, i) {
          if (i === 0) ctx.moveTo(x(s.t), y(s.row[t][1])); else ctx.lineTo(x(s.t), y(s.row[t][1]));
        });
        for (var i = stacks.length - 1; i >= 0; i--) ctx.lineTo(x(stacks[i].t), y(stacks[i].row[t][0]));
        ctx.closePath();
        ctx.fillStyle = colorOf(t);
        ctx.fill();
      });
    }
    frame(c);
    timeAxis(c, t0, t1);
    canvas.dataset.points = String(stacks.length);
    canvas.dataset.max = String(max);
  }

  function drawDwell(samples, names, t0, t1) {
    var canvas = $("dwell-chart"), c = setupCanvas(canvas), ctx = c.ctx;
    var plotW = c.w - c.left - c.right, plotH = c.h - c.top - c.bottom;
    var lo = 0.001, hi = 1, points = 0;
    samples.forEach(function (s) {
      Object.keys(s.dwell_p99 || {}).forEach(function (t) { hi = Math.max(hi, s.dwell_p99[t]); });
    });
    hi = Math.pow(10, Math.ceil(Math.log10(hi)));
    function x(t) { return c.left + plotW * (t - t0) / (t1 - t0); }
    function y(v) {
      var l = Math.log10(Math.max(lo, v));
      return c.top + plotH * (1 - (l - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)));
    }
    ctx.textAlign = "right";
    for (var d = lo; d <= hi * 1.0001; d *= 10) {
      ctx.strokeStyle = "#eef1f5";
      ctx.beginPath(); ctx.moveTo(c.left, y(d)); ctx.lineTo(c.w - c.right, y(d)); ctx.stroke();
      ctx.fillStyle = "#687084";
      ctx.fillText(d < 1 ? (1000 * d) + " ms" : d + " s", c.left - 4, y(d) + 4);
    }
    names.forEach(function (t) {
      if (t === OTHER) return;
      ctx.strokeStyle = ctx.fillStyle = colorOf(t);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      var drawing = false, prev = null;
      samples.forEach(function (s) {
        var v = (s.dwell_p99 || {})[t];
        // A tenant not served in a second has no dwell then: a gap, not a zero.
        if (!has(v) || (prev !== null && s.t - prev > 3000)) { drawing = false; }
        if (has(v)) {
          if (drawing) ctx.lineTo(x(s.t), y(v)); else ctx.moveTo(x(s.t), y(v));
          ctx.fillRect(x(s.t) - 1.5, y(v) - 1.5, 3, 3);
          drawing = true; prev = s.t; points++;
        }
      });
      ctx.stroke();
    });
    ctx.lineWidth = 1;
    frame(c);
    timeAxis(c, t0, t1);
    canvas.dataset.points = String(points);
  }

  function renderLegend(names) {
    var list = document.createElement("ul");
    list.id = "legend";
    list.className = "legend";
    names.forEach(function (t) {
      var li = document.createElement("li");
      var sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = colorOf(t);
      li.appendChild(sw);
      li.appendChild(document.createTextNode(t === OTHER ? "other tenants" : t));
      list.appendChild(li);
    });
    var old = $("legend");
    old.parentNode.replaceChild(list, old);
  }

  function renderCharts() {
    var t1 = Date.now(), t0 = t1 - SPAN_MS;
    var samples = state.samples.filter(function (s) { return s.t >= t0; });
    state.samples = samples;
    var names = seriesOf(samples);
    drawEgress(samples, names, t0, t1);
    drawDwell(samples, names, t0, t1);
    renderLegend(names);
  }

  // -- polling ---------------------------------------------------------------------------

  function poll() {
    var url = "tenants?limit=50&history_since=" + state.lastT;
    fetch(url, { cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        state.data = d;
        (d.history || []).forEach(function (s) {
          if (s.t > state.lastT) { state.samples.push(s); state.lastT = s.t; }
        });
        renderSummary(d);
        renderTenants(d);
        renderGroup(d);
        renderCharts();
        state.polls++;
        document.body.dataset.polls = String(state.polls);
      })
      .catch(function (e) {
        state.errors++;
        var badge = $("status");
        badge.textContent = "no answer (" + e.message + ")";
        badge.className = "badge bad";
      })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  window.addEventListener("resize", function () { if (state.data) renderCharts(); });
  poll();
})();
