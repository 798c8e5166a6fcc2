/* bertkit explainer page: draws the JSON of one sentence (from POST explain, or embedded by `bertkit explain`). */
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const embedded = document.getElementById("bertkit-data");
  const OFFLINE = embedded ? JSON.parse(embedded.textContent) : null;
  const CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };  // its tool bar hid chart titles
  const state = { info: null, result: null, seq: 0, timings: [], lastError: null };
  window.bertkit = state; // the browser tests read timings and the last result here

  // ---- helpers ----------------------------------------------------------------------------------------------------
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => {
      if (k === "text") node.textContent = v;
      else if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    });
    (children || []).forEach((c) => node.appendChild(typeof c === "string" ? document.createTextNode(c) : c));
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function option(select, value, label) { select.appendChild(el("option", { value: String(value), text: label })); }
  function tokenLabels(tokens) { return tokens.map((t, i) => i + " " + t); }
  function margin(l, b) { return { l: l || 90, r: 20, t: 30, b: b || 40 }; }
  // a chart's box takes its figure's size, so that a long input's figure never spills over the next panel
  // (and no wider than its panel: a long input's labels thin out rather than push the page sideways)
  function sized(id, height, width) {
    const box = $(id);
    box.style.height = height + "px";
    if (!width) return { height: height };
    width = Math.min(width, box.parentElement.clientWidth || width);
    box.style.width = width + "px";
    return { height: height, width: width };
  }
  const WHITE_BLUE = [[0, "#ffffff"], [1, "#08306b"]];
  // matplotlib's default colours, in the run's class order: a label has the colour it has in `train --report`'s pca.png
  const TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf"];

  function setPanel(id, data, draw) {
    const panel = $(id), error = panel.querySelector(".error"), body = panel.querySelector(".body");
    if (!data || data.error) {
      error.textContent = data ? data.error : "no data";
      error.hidden = false; body.hidden = true;
      return [];
    }
    error.hidden = true; body.hidden = false;
    return draw(data) || [];
  }

  function showEverywhere(message) {
    document.querySelectorAll(".panel").forEach((panel) => {
      const error = panel.querySelector(".error");
      error.textContent = message; error.hidden = false;
      panel.querySelector(".body").hidden = true;
    });
  }

  // ---- the API key -------------------------------------------------------------------------------------------------
  // The page itself holds no data and loads without a key; with `--api-key-*` its API calls need one. The page asks
  // for it once, keeps it in this tab's sessionStorage, and sends it as a bearer header (a page load cannot).
  const KEY = "bertkit-api-key";
  let keyAsked = null;

  function askKey(message) {
    if (keyAsked) return keyAsked;
    const form = $("key-form");
    $("key-message").textContent = message;
    form.hidden = false;
    $("api-key").focus();
    keyAsked = new Promise((resolve) => {
      form.onsubmit = (event) => {
        event.preventDefault();
        const key = $("api-key").value.trim();
        if (!key) return;
        sessionStorage.setItem(KEY, key);
        form.hidden = true;
        keyAsked = null;
        resolve();
      };
    });
    return keyAsked;
  }

  async function api(path, options) {
    for (;;) {
      const headers = Object.assign({}, (options || {}).headers);
      const key = sessionStorage.getItem(KEY);
      if (key) headers.Authorization = "Bearer " + key;
      const response = await fetch(path, Object.assign({}, options, { headers }));
      if (response.status !== 401) return response;
      if (key) sessionStorage.removeItem(KEY);
      $("status").textContent = "waiting for the API key";
      await askKey(key ? "That key was refused; check it and try again." : "");
    }
  }

  // ---- controls ---------------------------------------------------------------------------------------------------
  function fillControls(info) {
    state.info = info;
    $("model-line").textContent = `model ${info.model}: ${info.architecture}, ${info.layers} layers, hidden size ` +
      `${info.hidden_size}, ${info.heads} attention heads, max length ${info.max_length}` +
      (info.pooler ? ", with a pooler" : ", no pooler");
    const layer = clear($("layer")), attLayer = clear($("att-layer")), head = clear($("head")), run = clear($("map-run"));
    for (let i = 0; i < info.hidden_states; i++) option(layer, i, i === 0 ? "0 (embeddings)" : String(i));
    for (let i = 1; i <= info.layers; i++) option(attLayer, i, String(i));
    for (let h = 0; h < info.heads; h++) option(head, h, String(h));
    layer.value = String(info.hidden_states - 1);
    $("pooling").value = info.pooling;  // the model's own, as Encoder.embed's default
    attLayer.value = String(info.layers);
    if (info.map_runs.length === 0) option(run, "", "(no feature run)");
    info.map_runs.forEach((name) => option(run, name, name));
    $("pad").max = String(info.limits.tokens);
  }

  function settings() {
    const pad = $("pad").value.trim();
    return {
      text: $("text").value,
      pad_to: pad === "" ? null : Number(pad),
      layer: Number($("layer").value),
      attention_layer: Number($("att-layer").value),
      head: Number($("head").value),
      layers: $("layers").value,
      pooling: $("pooling").value,
      compare: $("compare").value.trim() === "" ? null : $("compare").value,
      map_run: $("map-run").value || null,
      pair: $("pair").value.trim() === "" ? null : $("pair").value,
      attributions: $("attributions").checked,
    };
  }

  function applySettings(s) {
    $("text").value = s.text;
    $("pad").value = s.pad_to == null ? "" : String(s.pad_to);
    $("compare").value = s.compare || "";
    $("pair").value = s.pair || "";
    $("layers").value = s.layers;
    $("pooling").value = s.pooling;
    if (s.map_run) $("map-run").value = s.map_run;
    $("attributions").checked = Boolean(s.attributions);
  }

  // a word's share of a score: blue raised it, red lowered it, the strongest word of the score at full colour
  function heat(share) {
    const [r, g, b] = share >= 0 ? [33, 102, 172] : [178, 24, 43];
    return `rgba(${r}, ${g}, ${b}, ${Math.min(1, Math.abs(share)) * 0.85})`;
  }

  function drawAttribution(box, a) {
    clear(box);
    if (!a) return;
    if (a.error) { box.appendChild(el("div", { class: "error", text: a.error })); return; }
    const strongest = Math.max(1e-12, ...a.texts.flatMap((t) => t.word_scores.map(Math.abs)));
    const rows = a.texts.map((t) => {
      const words = [];
      t.words.forEach((w, k) => {
        const v = t.word_scores[k], share = v / strongest;
        if (k) words.push(" ");
        words.push(el("span", { class: "word" + (Math.abs(share) > 0.55 ? " strong" : ""), "data-score": String(v),
          title: `${w}: ${v >= 0 ? "+" : ""}${v.toFixed(4)}`, style: `background:${heat(share)}`, text: w }));
      });
      return el("p", { class: "heat" }, words);
    });
    const worst = Math.max(...a.texts.map((t) => t.delta));
    const from = [...new Set(a.texts.map((t) => t.baseline_score.toFixed(4)))].join(" and ");
    box.appendChild(el("div", { class: "attribution" }, [
      el("h4", { text: `Why ${a.score.toFixed(4)}? Each word's share of the ${a.target}` }),
      ...rows,
      el("p", { class: "muted legend" }, [el("span", { class: "swatch", style: `background:${heat(1)}` }),
        " raised the score  ", el("span", { class: "swatch", style: `background:${heat(-1)}` }),
        ` lowered it; hover a word for its number. Integrated Gradients, ${a.n_steps} steps from the input with ` +
        `${a.texts.length > 1 && from.includes(" and ") ? "one text's words at a time" : "its words"} replaced by ` +
        `[${a.baseline.toUpperCase()}] (score ${from}); the shares add up to the ` +
        `difference within ${(100 * worst).toFixed(1)}%. They say which words moved this score in this model, ` +
        "not what the model learned from them, nor what words would do together."])]));
  }

  // ---- panels -----------------------------------------------------------------------------------------------------
  function drawTokens(d) {
    $("words").textContent = "Words: " + (d.words.length ? d.words.join("  ·  ") : "(none)") +
      (d.pair ? "   |   pair: " + (d.pair_words.length ? d.pair_words.join("  ·  ") : "(none)") : "");
    $("segments").textContent = d.pair ? d.segments.map((s) => `type id ${s.type_id} (text ${s.type_id ? "b" : "a"}): ` +
      `positions ${s.first}–${s.last}`).join(";  ") + `;  [SEP] at ${d.separators.join(" and ")}` : "";
    const table = clear($("tokens-table"));
    const unknown = new Set(d.unknown_positions);
    const rows = [["positions", "position", (r) => r.position], ["tokens", "token", (r) => r.token],
      ["ids", "id", (r) => r.id], ["mask", "attention mask", (r) => r.mask],
      ["type-ids", "token type id", (r) => r.type_id], ["word-ids", "word id", (r) => (r.word == null ? "–" : r.word)]];
    rows.forEach(([cls, name, get]) => {
      const tr = el("tr", { class: cls }, [el("th", { text: name })]);
      d.rows.forEach((r) => {
        let kind = "";
        if (unknown.has(r.position)) kind = "unk";
        else if (r.mask === 0) kind = "pad";
        else if (/^\[.+\]$|^<.+>$/.test(r.token)) kind = "special";
        else if (r.token.startsWith("##")) kind = "piece";
        if (r.type_id === 1 && r.mask === 1) kind += " segment-b";
        tr.appendChild(el("td", { class: kind.trim(), text: String(get(r)) }));
      });
      table.appendChild(tr);
    });
    const coverage = $("coverage");
    let text = "vocabulary coverage: " + d.coverage.message;
    if (d.truncated) text += `  (the input was truncated to ${d.width} tokens)`;
    coverage.textContent = text;
    coverage.className = d.coverage.poor || d.unknown_positions.length ? "warning" : "muted";
  }

  function drawModel(d) {
    const shapes = clear($("shapes-table"));
    shapes.appendChild(el("tr", {}, [el("th", { text: "tensor" }), el("th", { text: "shape" })]));
    d.shapes.forEach((s) => shapes.appendChild(el("tr", {}, [el("td", { text: s.name }),
      el("td", { class: "shape", text: s.shape ? "(" + s.shape.join(", ") + ")" : "none (this model has no pooler)" })])));
    const labels = tokenLabels(d.tokens);
    const layer = $("layer").value, attLayer = $("att-layer").value, head = $("head").value;
    const states = d.norms.map((_, i) => "h" + i);
    const plots = [
      Plotly.react("norms", [{ type: "heatmap", z: d.norms, x: labels, y: states, colorscale: "Viridis",
        hovertemplate: "%{y} %{x}<br>norm %{z}<extra></extra>" }],
      { title: { text: "vector norm per layer", font: { size: 13 } }, margin: margin(40, 80), xaxis: { tickangle: -45 } }, CONFIG),
      Plotly.react("cosines", [{ type: "heatmap", z: d.cosine_to_previous, x: labels, y: states.slice(1).map((s, i) => s + "·h" + i),
        colorscale: "Cividis", zmin: 0, zmax: 1, hovertemplate: "%{y} %{x}<br>cosine %{z}<extra></extra>" }],
      { title: { text: "cosine to the previous layer", font: { size: 13 } }, margin: margin(60, 80), xaxis: { tickangle: -45 } }, CONFIG),
    ];
    const vectors = d.vectors[layer];
    if (vectors) {
      plots.push(Plotly.react("heatmap", [{ type: "heatmap", z: vectors, y: labels, colorscale: "RdBu", zmid: 0,
        hovertemplate: "%{y}<br>dim %{x}: %{z}<extra></extra>" }],
      { title: { text: `token vectors of hidden_states[${layer}] (tokens × ${d.hidden_size} dims)`, font: { size: 13 } },
        margin: margin(110), yaxis: { autorange: "reversed" }, ...sized("heatmap", Math.max(320, 16 * labels.length + 90)) },
      CONFIG));
    }
    const matrix = d.attention[attLayer] && d.attention[attLayer][head];
    if (matrix) {
      plots.push(Plotly.react("attention", [{ type: "heatmap", z: matrix, x: labels, y: labels, colorscale: WHITE_BLUE,
        zmin: 0, zmax: 1, hovertemplate: "%{y} attends to %{x}: %{z}<extra></extra>" }],
      { title: { text: `attention of layer ${attLayer}, head ${head} (rows: queries, columns: keys)`, font: { size: 13 } },
        margin: margin(110, 90), xaxis: { tickangle: -45 }, yaxis: { autorange: "reversed" },
        ...sized("attention", Math.max(560, 14 * labels.length + 200), Math.max(640, 14 * labels.length + 260)) }, CONFIG));
    }
    return plots;
  }

  function drawSentence(d) {
    $("sentence-facts").textContent = `layers=${d.layers}  pooling=${d.pooling}  →  a vector of ${d.dim} numbers ` +
      `(norm ${d.norm})`;
    const none = OFFLINE ? "No second sentence was saved (`bertkit explain TEXT --compare OTHER` shows their cosine)."
      : "Type a second sentence in “Compare with” to see their cosine.";
    $("cosine").textContent = d.cosine == null ? none
      : `cosine(“${state.result.settings.text}”, “${d.compare}”) = ${d.cosine}`;
    drawAttribution($("cosine-attribution"), d.attribution);
    return [Plotly.react("strip", [{ type: "heatmap", z: [d.vector], y: ["vector"], colorscale: "RdBu", zmid: 0,
      showscale: false, hovertemplate: "dim %{x}: %{z}<extra></extra>" }],
    { margin: { l: 60, r: 20, t: 10, b: 30 }, yaxis: { showticklabels: false } }, CONFIG)];
  }

  function drawMap(d) {
    const source = $("map-source");
    source.className = d.note ? "note" : "muted";
    $("map").hidden = Boolean(d.note);
    if (d.note) { source.textContent = d.note; return []; }
    source.textContent = `run ${d.run}: ${d.source}; PCA explains ` +
      d.explained_variance.map((v) => (100 * v).toFixed(1) + "%").join(" + ") + " of the variance.";
    // the training sentences come only when the server shows them (`--map-texts`, or bertkit's sample reviews)
    const traces = d.groups.map((g, k) => ({ type: "scatter", mode: "markers", name: g.label, x: g.x, y: g.y, text: g.text,
      marker: { size: 7, opacity: 0.7, color: TAB10[k % TAB10.length] }, hovertemplate: (g.text ? "%{text}" : "a training sentence") +
        "<extra>" + g.label + "</extra>" }));
    traces.push({ type: "scatter", mode: "markers+text", name: "your sentence", x: [d.sentence.x], y: [d.sentence.y],
      text: ["your sentence → " + d.sentence.predicted], textposition: "top center",
      marker: { symbol: "star", size: 18, color: "#111", line: { color: "#fff", width: 1 } } });
    return [Plotly.react("map", traces, { margin: margin(50), xaxis: { title: { text: "PC 1" } },
      yaxis: { title: { text: "PC 2" } }, legend: { orientation: "h" } }, CONFIG)];
  }

  function drawAnswer(card, p) {
    // question answering: the question beside its context, the answer marked inside the window it came from
    const a = p.answer, text = p.context, [w0, w1] = p.span;
    const win = el("span", { class: "window", title: `window ${p.window + 1} of ${p.windows}` });
    if (a.answer) {
      win.append(text.slice(w0, a.start), el("mark", { class: "answer", text: text.slice(a.start, a.end) }),
        text.slice(a.end, w1));
    } else win.append(text.slice(w0, w1));
    const context = el("p", { class: "qa-context" }, [text.slice(0, w0), win, text.slice(w1)]);
    card.appendChild(el("div", { class: "qa" }, [el("div", {}, [el("h4", { text: "question" }),
      el("p", { class: "qa-question", text: p.question })]), el("div", {}, [el("h4", { text: "context" }), context])]));
    card.appendChild(el("p", { class: "qa-facts" }, [a.answer ? "answer " : "", el("span", { class: "label",
      text: a.answer ? `“${a.answer}”` : "no answer" }), `  score ${a.score.toFixed(4)}  ·  from window ${p.window + 1} ` +
      `of ${p.windows} (shaded: context characters ${w0}–${w1})  ·  null score ${p.null_score} (the least [CLS] start + end ` +
      `logit over the windows; probability in this window ${p.null_probability}), threshold ${p.threshold}`]));
    const chart = el("div", { class: "chart strip-chart qa-strip" });
    card.appendChild(chart);
    return () => Plotly.react(chart, [{ type: "heatmap", z: [p.start, p.end], x: tokenLabels(p.tokens),
      y: ["start", "end"], colorscale: WHITE_BLUE, zmin: 0, zmax: 1,
      hovertemplate: "%{x}<br>P(%{y}) = %{z}<extra></extra>" }],
    { title: { text: `start and end probabilities over the context tokens of window ${p.window + 1}`, font: { size: 13 } },
      margin: { l: 50, r: 20, t: 30, b: 90 }, xaxis: { tickangle: -45 } }, CONFIG);
  }

  function drawPredictions(predictions) {
    const box = clear($("predictions")), plots = [];
    const names = Object.keys(predictions);
    if (names.length === 0) {
      box.appendChild(el("p", { class: "note", text: "No trained run is loaded. Start the page with " +
        "`bertkit serve --run sst2=runs/sst2` (or `bertkit explain … --run DIR`) to see a prediction here." }));
    }
    names.forEach((name) => {
      const p = predictions[name], card = el("div", { class: "prediction", "data-run": name });
      card.appendChild(el("h3", { text: name + (p.kind ? ` (${p.kind})` : "") }));
      if (p.error) card.appendChild(el("div", { class: "error", text: p.error }));
      else if (p.kind === "qa") {
        const strip = drawAnswer(card, p);
        if (p.attribution) drawAttribution(card.appendChild(el("div", { class: "why" })), p.attribution);
        box.appendChild(card);
        plots.push(strip());
        return;
      } else if (p.kind === "score") {
        card.appendChild(el("p", {}, [(p.pair ? "score of the pair " : "score "), el("span", { class: "label score",
          text: p.score.toFixed(4) })]));
      } else if (p.kind === "classifier") {
        card.appendChild(el("p", {}, ["label ", el("span", { class: "label", text: p.label }), "  probability ",
          el("span", { class: "probability", text: p.probability })]));
        p.classes.forEach((c) => card.appendChild(el("div", { class: "bar" }, [el("span", { class: "name", text: c.label }),
          el("span", { class: "fill", style: `width:${Math.round(300 * c.probability)}px` }),
          el("span", { text: c.probability.toFixed(4) })])));
      } else {
        const line = el("p", { class: "tagged" });
        let cursor = 0;
        p.entities.forEach((e) => {
          line.appendChild(document.createTextNode(p.text.slice(cursor, e.start)));
          line.appendChild(el("mark", { title: `${e.type} ${e.score}` }, [e.text, el("small", { text: e.type })]));
          cursor = e.end;
        });
        line.appendChild(document.createTextNode(p.text.slice(cursor)));
        card.appendChild(line);
        if (!p.entities.length) card.appendChild(el("p", { class: "muted", text: "no entities found" }));
      }
      if (p.attribution) drawAttribution(card.appendChild(el("div", { class: "why" })), p.attribution);
      box.appendChild(card);
    });
    return plots;
  }

  function drawProbes(probes) {
    const box = clear($("probes"));
    const names = Object.keys(probes);
    if (names.length === 0) {
      box.appendChild(el("p", { class: "note", text: "No probe run is loaded. Write one with `bertkit probe TRAIN --dev DEV " +
        "-o runs/probe` and add `--run runs/probe` to see which layer works best." }));
    }
    const plots = [];
    names.forEach((name, k) => {
      const p = probes[name], card = el("div", { class: "probe", "data-probe": name });
      card.appendChild(el("h3", { text: name }));
      if (p.error) { card.appendChild(el("div", { class: "error", text: p.error })); box.appendChild(card); return; }
      card.appendChild(el("p", { class: "muted", text: `${p.task} probe of ${p.facts.model || "the model"}` +
        (p.facts.train_rows ? ` (trained on ${p.facts.train_rows} rows, scored on ${p.facts.dev_rows} dev rows)` : "") + `; best: ` +
        `${p.best.pooling} / ${p.best.layers} (${p.metric} ${p.best.score})` }));
      const columns = Object.keys(p.rows[0]);
      const table = el("table", { class: "small" }, [el("tr", {}, columns.map((c) => el("th", { text: c })))]);
      p.rows.forEach((r) => table.appendChild(el("tr", {}, columns.map((c) => el("td", { text: String(r[c]) })))));
      const chart = el("div", { class: "chart", id: "probe-chart-" + k, style: "width:100%;height:340px" });
      card.appendChild(el("div", { class: "row" }, [table, chart]));
      box.appendChild(card);
      plots.push(Plotly.react(chart, p.series.map((s) => ({ type: "scatter", mode: s.pooling === "pooler" ? "markers" : "lines+markers",
        name: s.pooling, x: s.x, y: s.y })), { margin: { l: 50, r: 20, t: 10, b: 110 },
        yaxis: { title: { text: `dev ${p.metric} (%)` } }, xaxis: { tickangle: -40 } }, CONFIG));
    });
    return plots;
  }

  function draw(result) {
    state.result = result;
    return Promise.all([].concat(
      setPanel("panel-tokens", result.tokenization, drawTokens),
      setPanel("panel-model", result.model, drawModel),
      setPanel("panel-sentence", result.sentence, drawSentence),
      setPanel("panel-map", result.map, drawMap),
      setPanel("panel-prediction", result.predictions, drawPredictions),
      setPanel("panel-probe", result.probes, drawProbes)));
  }

  // ---- live updates -----------------------------------------------------------------------------------------------
  async function update() {
    const seq = ++state.seq, started = performance.now();
    $("status").textContent = "updating…";
    let response, body;
    try {
      response = await api("explain", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(settings()) });
      body = await response.json();
    } catch (err) {
      if (seq === state.seq) {
        showEverywhere("The server did not answer (" + err.message + "). Is `bertkit serve` still running?");
        document.body.dataset.done = String(seq);
      }
      return;
    }
    if (seq !== state.seq) return; // a newer request is on its way
    if (!response.ok) {
      state.lastError = body.error || ("HTTP " + response.status);
      showEverywhere(state.lastError);
      $("status").textContent = "";
      document.body.dataset.done = String(seq);
      return;
    }
    state.lastError = null;
    await draw(body);
    const elapsed = performance.now() - started;
    state.timings.push(elapsed);
    $("status").textContent = `all panels updated in ${elapsed.toFixed(0)} ms`;
    document.body.dataset.updated = String(seq);
    document.body.dataset.done = String(seq);
  }

  let timer = null;
  function later() { clearTimeout(timer); timer = setTimeout(update, 150); }

  function redrawOffline() { return draw(OFFLINE.result); }

  async function start() {
    if (OFFLINE) {
      fillControls(OFFLINE.info);
      applySettings(OFFLINE.result.settings);
      ["text", "pad", "pair", "compare", "layers", "pooling", "map-run", "attributions"].forEach((id) => {
        $(id).disabled = true;
      });
      const note = $("static-note");
      note.textContent = "Saved by `bertkit explain`: the sentence and its settings are fixed; the heatmap layer, " +
        "attention layer and head switch here. Run `bertkit serve` to explain any sentence.";
      note.hidden = false;
      ["layer", "att-layer", "head"].forEach((id) => $(id).addEventListener("change", redrawOffline));
      await redrawOffline();
      document.body.dataset.updated = "offline";
      return;
    }
    try {
      const response = await api("explain/info");
      const info = await response.json();
      if (!response.ok) throw new Error(info.error || "HTTP " + response.status);
      fillControls(info);
    } catch (err) {
      showEverywhere("Could not read the model facts from the server (" + err.message + ").");
      return;
    }
    ["text", "pad", "pair", "compare", "layers", "pooling"].forEach((id) => $(id).addEventListener("input", later));
    ["layer", "att-layer", "head", "map-run", "attributions"].forEach((id) => $(id).addEventListener("change", update));
    await update();
  }

  start();
})();
