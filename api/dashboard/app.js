// quota usage dashboard: signs in with an app key or the admin token (kept
// in sessionStorage), then shows the stats API's figures and the server-drawn
// call curve, refreshing every 15 s.
"use strict";

(function () {
  const REFRESH_MS = 15000;
  const RANGES = { "24h": 24 * 3600e3, "7d": 7 * 86400e3, "30d": 30 * 86400e3, "1y": 365 * 86400e3 };
  const $ = (id) => document.getElementById(id);
  const fmt = new Intl.NumberFormat("en-US");
  // pinnedDate: a day the user picked; otherwise the figures follow the
  // server's today (UTC).
  const state = { token: sessionStorage.getItem("quota.token") || "", app: "", range: "24h", iface: null, timer: null, pinnedDate: "" };

  async function api(path, asText) {
    const res = await fetch(path, { headers: { Authorization: "Bearer " + state.token }, cache: "no-store" });
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { const j = await res.json(); if (j.error) msg = j.error.message + " (" + j.error.code + ")"; } catch (_) {}
      const err = new Error(msg);
      err.status = res.status;
      throw err;
    }
    return asText ? res.text() : res.json();
  }

  function appPath(app) { return "/v1/apps/" + encodeURIComponent(app); }

  async function signIn(token) {
    state.token = token;
    const list = await api("/v1/apps");
    sessionStorage.setItem("quota.token", token);
    const sel = $("app");
    sel.textContent = "";
    for (const a of list.apps) {
      const o = document.createElement("option");
      o.value = o.textContent = a.app_id;
      sel.appendChild(o);
    }
    const wanted = sessionStorage.getItem("quota.app");
    state.app = list.apps.some((a) => a.app_id === wanted) ? wanted : (list.apps[0] ? list.apps[0].app_id : "");
    sel.value = state.app;
    sel.disabled = list.apps.length < 2;
    $("signin").hidden = true;
    $("board").hidden = false;
    $("who").hidden = false;
    if (!state.app) {
      $("title").textContent = "No apps yet";
      $("board-error").textContent = "No app has a key or calls in the last 31 days.";
      return;
    }
    await refresh();
    schedule();
  }

  function signOut() {
    sessionStorage.removeItem("quota.token");
    state.token = "";
    clearInterval(state.timer);
    $("board").hidden = true;
    $("who").hidden = true;
    $("signin").hidden = false;
    $("token").value = "";
  }

  function schedule() {
    clearInterval(state.timer);
    if ($("auto").checked) state.timer = setInterval(refresh, REFRESH_MS);
  }

  async function refresh() {
    if (!state.app) return;
    $("title").textContent = state.app;
    try {
      const day = state.pinnedDate ? "?date=" + encodeURIComponent(state.pinnedDate) : "";
      const [stats, throttled, usage, nearest] = await Promise.all([
        api(appPath(state.app) + "/stats" + day),
        api(appPath(state.app) + "/throttled" + day),
        api(appPath(state.app) + "/usage"),
        api(appPath(state.app) + "/usage/nearest").catch((e) => { if (e.status === 404) return { rules: [] }; throw e; }),
        drawChart(),
      ]);
      showStats(stats);
      showThrottled(throttled);
      showUsage(usage);
      showNearest(nearest);
      $("board-error").textContent = "";
      $("updated").textContent = "updated " + new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      document.body.dataset.loaded = "1";
    } catch (e) {
      $("board-error").textContent = e.message;
      if (e.status === 401) signOut();
    }
  }

  function showStats(s) {
    $("date").value = s.date;
    $("m-calls").textContent = fmt.format(s.calls);
    $("m-allowed").textContent = fmt.format(s.allowed);
    $("m-denied").textContent = fmt.format(s.denied);
    $("m-users").textContent = fmt.format(s.unique_users);
    $("m-denied-pct").textContent = s.calls ? (100 * s.denied / s.calls).toFixed(1) + "% of calls" : "";
    const body = $("ifaces");
    body.textContent = "";
    if (!s.interfaces.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = document.createElement("td");
      td.colSpan = 6;
      td.textContent = "No calls on " + s.date;
      tr.appendChild(td);
      body.appendChild(tr);
    }
    const top = s.interfaces.reduce((m, i) => Math.max(m, i.calls), 0) || 1;
    for (const i of s.interfaces) {
      const tr = document.createElement("tr");
      tr.dataset.iface = i.interface_id;
      if (state.iface === i.interface_id) tr.className = "selected";
      const cells = [
        [i.interface_id || "(none)", "name"],
        [fmt.format(i.calls), "num"],
        [fmt.format(i.allowed), "num"],
        [fmt.format(i.denied), "num"],
        [i.calls ? (100 * i.denied / i.calls).toFixed(1) + "%" : "–", "num"],
      ];
      for (const [text, cls] of cells) {
        const td = document.createElement("td");
        td.className = cls;
        td.textContent = text;
        tr.appendChild(td);
      }
      const td = document.createElement("td");
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = (100 * i.calls / top).toFixed(1) + "%";
      bar.appendChild(fill);
      td.appendChild(bar);
      tr.appendChild(td);
      tr.addEventListener("click", () => {
        state.iface = state.iface === i.interface_id ? null : i.interface_id;
        refresh();
      });
      body.appendChild(tr);
    }
  }

  // showUsage draws each app-level limit of the app's plan as a bar: used
  // of limit, and when it resets (GET /v1/apps/{app}/usage, counting nothing).
  function showUsage(u) {
    $("plan").textContent = "plan " + u.plan;
    const box = $("quotas");
    box.textContent = "";
    if (!u.limits.length) {
      box.textContent = "No limit is counted for the app alone.";
      return;
    }
    for (const l of u.limits) {
      const row = document.createElement("div");
      row.className = "quota" + (l.used >= 0.8 * l.limit ? " near" : "");
      const label = document.createElement("div");
      label.className = "quota-label";
      label.textContent = l.rule + " · " + l.window;
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = Math.min(100, 100 * l.used / l.limit).toFixed(1) + "%";
      bar.appendChild(fill);
      const text = document.createElement("div");
      text.className = "sub";
      text.textContent = fmt.format(l.used) + " of " + fmt.format(l.limit) + " used · resets in " + human(l.reset_after_ms);
      row.append(label, bar, text);
      box.appendChild(row);
    }
  }

  // showNearest fills the "nearest their quotas" table: for each quota
  // counted per identity, the identities past half of it, most used first
  // (GET /v1/apps/{app}/usage/nearest).
  function showNearest(n) {
    const body = $("nearest");
    body.textContent = "";
    for (const q of n.rules) {
      for (const id of q.top) {
        const tr = document.createElement("tr");
        tr.dataset.rule = q.rule;
        if (id.used >= q.limit) tr.className = "full";
        const dims = Object.keys(id.dimensions).sort().map((k) => k + "=" + id.dimensions[k]).join(" ");
        for (const [text, cls] of [[q.rule + " · " + q.window, "name"], [dims, "name"],
          [fmt.format(id.used) + " of " + fmt.format(q.limit), "num"]]) {
          const td = document.createElement("td");
          td.className = cls;
          td.textContent = text;
          tr.appendChild(td);
        }
        const td = document.createElement("td");
        const bar = document.createElement("div");
        bar.className = "bar";
        bar.title = "resets in " + human(q.reset_after_ms);
        const fill = document.createElement("span");
        fill.style.width = Math.min(100, 100 * id.used / q.limit).toFixed(1) + "%";
        bar.appendChild(fill);
        td.appendChild(bar);
        tr.appendChild(td);
        body.appendChild(tr);
      }
    }
    if (!body.children.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = document.createElement("td");
      td.colSpan = 4;
      td.textContent = "No identity has used half of a quota this period";
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  // human writes a duration in ms as "2 d 4 h", "3 h 20 min", "45 s".
  function human(ms) {
    const s = Math.ceil(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) return d + " d " + h + " h";
    if (h) return h + " h " + m + " min";
    if (m) return m + " min";
    return s + " s";
  }

  // showThrottled fills the "who is throttled" table: per rule its most
  // denied identities (dimension=value, the app id left out), then the most
  // denied interfaces.
  function showThrottled(t) {
    const body = $("throttled");
    body.textContent = "";
    const row = (cells, attrs) => {
      const tr = document.createElement("tr");
      Object.assign(tr.dataset, attrs || {});
      for (const [text, cls, title] of cells) {
        const td = document.createElement("td");
        td.className = cls;
        td.textContent = text;
        if (title) td.title = title;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    };
    for (const r of t.rules) {
      for (const id of r.top) {
        const dims = Object.keys(id.dimensions).sort().filter((k) => k !== "app_id")
          .map((k) => k + "=" + id.dimensions[k]).join(" ") || "(the app)";
        const approx = id.max_overcount ? "≤ " : "";
        row([[r.rule, "name"], [dims, "name"], [approx + fmt.format(id.denied), "num",
          id.max_overcount ? "at least " + fmt.format(id.denied - id.max_overcount) : ""]], { rule: r.rule });
      }
    }
    for (const i of t.interfaces) {
      row([["interface", "muted"], [i.interface_id || "(none)", "name"], [fmt.format(i.denied), "num"]], { iface: i.interface_id });
    }
    if (!body.children.length) {
      row([["Nobody was throttled on " + t.date, ""]]);
      body.firstChild.className = "empty";
      body.firstChild.firstChild.colSpan = 3;
    }
  }

  async function drawChart() {
    const to = new Date();
    const from = new Date(to.getTime() - RANGES[state.range]);
    let q = "?from=" + encodeURIComponent(from.toISOString().replace(/\.\d+Z$/, "Z")) +
      "&to=" + encodeURIComponent(to.toISOString().replace(/\.\d+Z$/, "Z"));
    if (state.iface !== null) q += "&interface_id=" + encodeURIComponent(state.iface);
    const svg = await api(appPath(state.app) + "/series.svg" + q, true);
    const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
    const root = doc.documentElement;
    const chart = $("chart");
    chart.textContent = "";
    chart.appendChild(document.importNode(root, true));
    $("chart-scope").textContent = state.iface === null ? "all interfaces" : (state.iface || "(none)");
    const calls = Number(root.getAttribute("data-calls") || 0);
    const denied = Number(root.getAttribute("data-denied") || 0);
    $("chart-total").textContent = fmt.format(calls) + " calls, " + fmt.format(denied) + " denied in the last " +
      { "24h": "24 hours", "7d": "7 days", "30d": "30 days", "1y": "year" }[state.range];
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      $("signin-error").textContent = "";
      try {
        await signIn($("token").value.trim());
      } catch (e) {
        state.token = "";
        $("signin-error").textContent = e.status === 401 ? "That key is not valid." : e.message;
      }
    });
    $("signout").addEventListener("click", signOut);
    $("app").addEventListener("change", () => {
      state.app = $("app").value;
      state.iface = null;
      sessionStorage.setItem("quota.app", state.app);
      refresh();
    });
    $("date").addEventListener("change", () => { state.pinnedDate = $("date").value; refresh(); });
    $("auto").addEventListener("change", schedule);
    for (const b of document.querySelectorAll(".ranges button")) {
      b.addEventListener("click", () => {
        state.range = b.dataset.range;
        for (const o of document.querySelectorAll(".ranges button")) o.classList.toggle("active", o === b);
        drawChart().catch((e) => { $("board-error").textContent = e.message; });
      });
    }
    if (state.token) signIn(state.token).catch(() => signOut());
  });
})();
