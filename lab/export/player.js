// The offline player (lab/export/player.py writes it into the page). It unpacks plotly.js and the run,
// then shows any step: each figure is the lab's own JSON for that step, rebuilt from the nearest whole
// copy and the edits after it (the four edits of lab/export/delta.py). Text from the run is set as
// text, or arrives as HTML the lab escaped; nothing here fetches anything.
"use strict";
(async function () {
  const $ = (id) => document.getElementById(id);

  async function unpack(id) {
    const bytes = Uint8Array.from(atob($(id).textContent.trim()), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }

  // ---- the edits of lab/export/delta.py ----
  function patch(doc, edits) {
    const root = [doc]; // a holder, so that an edit of the whole document has a parent too
    for (const edit of edits) {
      const kind = edit[0];
      const path = [0, ...edit[1]];
      let parent = root;
      for (const key of path.slice(0, -1)) parent = parent[key];
      const key = path[path.length - 1];
      if (kind === "set") parent[key] = structuredClone(edit[2]);
      else if (kind === "del") delete parent[key];
      else if (kind === "splice") parent[key] = parent[key].slice(edit[2]).concat(structuredClone(edit[3]));
      else if (kind === "trunc") parent[key].length = edit[2];
      else throw new Error("unknown edit " + kind);
    }
    return root[0];
  }

  const timings = { start: performance.now() }; // where opening the page goes (bench/offline_page.py)
  const [plotlySource, dataText] = await Promise.all([unpack("p-plotly"), unpack("p-data")]);
  timings.unpacked = performance.now();
  const plotly = document.createElement("script");
  plotly.textContent = plotlySource;
  document.head.appendChild(plotly);
  timings.plotly_ready = performance.now();
  const data = JSON.parse(dataText);
  timings.data_ready = performance.now();
  const last = data.steps.length - 1;
  const storageKey = "scheduler-loop-lab/" + document.body.dataset.storage;
  const saved = load();
  const state = { cursor: saved.cursor ?? data.start, playing: null, presenter: false };
  const cache = {}; // key -> {i, fig}: the figure at step i, light sizes

  function load() {
    try { return JSON.parse(localStorage.getItem(storageKey) || "{}"); } catch (e) { return {}; }
  }
  function save(extra) {
    try {
      const kept = Object.assign(load(), { cursor: state.cursor }, extra || {});
      localStorage.setItem(storageKey, JSON.stringify(kept));
    } catch (e) { /* a browser that keeps nothing for file:// pages: the page still works */ }
  }

  function figureAt(key, i) {
    const list = data.figures[key];
    if (i < 0 || !list[i]) return null;
    const held = cache[key];
    if (held && held.i === i) return held.fig;
    let fig;
    if (held && held.i === i - 1 && list[i].edits) {
      fig = patch(held.fig, list[i].edits);
    } else {
      let k = i;
      while (!list[k].full) k -= 1;
      fig = structuredClone(list[k].full);
      for (let j = k + 1; j <= i; j += 1) fig = patch(fig, list[j].edits);
    }
    cache[key] = { i, fig };
    return fig;
  }

  function shown(key, i) {
    const fig = figureAt(key, i);
    if (fig === null) return null;
    return state.presenter ? patch(structuredClone(fig), data.presenter[key][i]) : fig;
  }

  // ---- the views ----
  const views = {};
  function section(key, heading) {
    const box = document.createElement("section");
    box.className = "p-view";
    box.dataset.key = key;
    const title = document.createElement("h3");
    title.textContent = heading;
    box.appendChild(title);
    const body = document.createElement("div");
    body.className = key === "why" ? "p-why" : "p-figure";
    box.appendChild(body);
    $("p-views").appendChild(box);
    return { box, title, body };
  }
  for (const key of data.keys) {
    views[key] = section(key, "");
    if (key === data.why_after) views.why = section("why", "Why: this step's decisions");
  }
  if (!views.why) views.why = section("why", "Why: this step's decisions");

  const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };

  function intro() {
    const box = document.createElement("div");
    const title = document.createElement("h2");
    title.textContent = "Ready at step 0";
    const lede = document.createElement("p");
    lede.textContent = "Press Step to run the first turn of the scheduler loop. These requests will arrive:";
    const table = document.createElement("table");
    const columns = Object.keys(data.intro[0] || {}); // lab.markup.workload_rows' columns, in its order
    const head = table.insertRow();
    for (const c of columns) {
      const th = document.createElement("th");
      th.textContent = c.replaceAll("_", " ");
      head.appendChild(th);
    }
    for (const row of data.intro) {
      const tr = table.insertRow();
      for (const c of columns) tr.insertCell().textContent = row[c] ?? "";
    }
    box.append(title, lede, table);
    return box;
  }

  function header(i) {
    const head = $("p-head");
    head.replaceChildren();
    if (i < 0) { head.appendChild(intro()); return; }
    const step = data.steps[i];
    const title = document.createElement("h2");
    title.textContent = "Step " + step.step + " ";
    const of = document.createElement("span");
    of.className = "p-of";
    of.textContent = "of " + data.steps[last].step;
    title.appendChild(of);
    const badges = document.createElement("p");
    for (const [colour, text] of step.badges) {
      const badge = document.createElement("span");
      badge.className = "p-badge p-" + colour;
      badge.textContent = text;
      badges.appendChild(badge);
    }
    head.append(title, badges);
  }

  // A figure off screen is drawn when it scrolls into view: opening the page and each step cost
  // only the figures a student can see (Plotly takes tens of ms a figure).
  const onScreen = new Set();
  let firstScreen;
  const firstScreenDrawn = new Promise((done) => { firstScreen = done; });
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const key = entry.target.dataset.key;
      if (entry.isIntersecting) { onScreen.add(key); if (views[key].stale) drawFigure(key); } else onScreen.delete(key);
    }
    firstScreen();
  }, { rootMargin: "200px" });

  function drawFigure(key) {
    const view = views[key];
    const fig = shown(key, state.cursor);
    view.stale = false;
    if (fig === null) return;
    const copy = structuredClone(fig); // Plotly writes into what it is given; the player's copy stays as built
    Plotly.react(view.body, copy.data || [], copy.layout || {}, config);
  }

  function draw() {
    const i = state.cursor;
    header(i);
    for (const key of data.keys) {
      const view = views[key];
      const present = i >= 0 && data.figures[key][i] !== null;
      view.box.hidden = !present;
      if (!present) continue;
      view.title.textContent = data.steps[i].headings[key];
      view.body.style.minHeight = data.steps[i].heights[key] + "px"; // keeps the page from jumping
      view.stale = true;
      if (onScreen.has(key)) drawFigure(key);
    }
    views.why.box.hidden = i < 0;
    if (i >= 0) views.why.body.innerHTML = data.steps[i].why.map((line) => "<div class='lab-event'>" + line + "</div>").join("");
    $("p-scrub").value = String(i);
    $("p-where").textContent = i < 0 ? "before step 0" : "step " + data.steps[i].step + " of " + data.steps[last].step;
    $("p-back").disabled = i < 0;
    $("p-step").disabled = i >= last;
    document.dispatchEvent(new CustomEvent("player:step", { detail: i }));
  }

  function seek(i) {
    state.cursor = Math.max(-1, Math.min(last, i));
    save();
    draw();
  }
  function play(on) {
    if (on && !state.playing && state.cursor < last) {
      state.playing = setInterval(() => (state.cursor >= last ? play(false) : seek(state.cursor + 1)), 500);
    } else if (!on && state.playing) {
      clearInterval(state.playing);
      state.playing = null;
    }
    $("p-play").textContent = state.playing ? "❚❚ Pause" : "▶ Play";
  }

  $("p-scrub").min = "-1";
  $("p-scrub").max = String(last);
  $("p-back").addEventListener("click", () => seek(state.cursor - 1));
  $("p-step").addEventListener("click", () => seek(state.cursor + 1));
  $("p-play").addEventListener("click", () => play(!state.playing));
  $("p-scrub").addEventListener("input", (e) => seek(Number(e.target.value)));
  $("p-presenter").addEventListener("change", (e) => {
    state.presenter = e.target.checked;
    document.body.classList.toggle("presenter", state.presenter);
    draw();
  });
  document.addEventListener("keydown", (e) => {
    if (e.target.closest && e.target.closest("input, textarea, select")) return;
    if (e.key === "ArrowRight") seek(state.cursor + 1);
    else if (e.key === "ArrowLeft") seek(state.cursor - 1);
    else if (e.key === " ") { e.preventDefault(); play(!state.playing); }
    else return;
  });

  // What a lesson's script (or a test) may use.
  window.labPlayer = {
    data, seek, save, load, patch, timings,
    get cursor() { return state.cursor; },
    figure: (key) => { const fig = shown(key, state.cursor); return fig === null ? null : structuredClone(fig); },
    drawn: (key) => !views[key].stale && views[key].body.classList.contains("js-plotly-plot"),
  };
  $("p-loading").remove();
  draw(); // the views are laid out, not yet drawn: the observer reports which are on screen
  for (const key of data.keys) observer.observe(views[key].box);
  await firstScreenDrawn;
  timings.drawn = performance.now();
  document.dispatchEvent(new CustomEvent("player:ready"));
  document.body.dataset.ready = "1";
})().catch((error) => {
  const box = document.getElementById("p-loading");
  if (box) box.textContent = "This page could not unpack its run: " + error + ". It needs a current browser (Chrome, Edge, Firefox or Safari from 2023 on).";
});
