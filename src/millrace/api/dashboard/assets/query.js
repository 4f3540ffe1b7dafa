// millrace dashboard, query page: runs the SQL box's query with POST /sql and shows the answer
// as a table, and as a line chart when it has a time column and columns of numbers.
//
// Everything an answer or an error holds goes into the page as text (textContent and
// setAttribute), never as HTML. The chart is SVG drawn here, since the answer arrives after
// the page; it has the classes of the app charts that charts.py draws on the server.
(() => {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 920;
  const PLOT_H = 200;
  const LEFT = 64;
  const RIGHT = 16;
  const TOP = 24;
  const LEGEND_W = 224;
  const COLOURS = 8;
  const MAX_LINES = 8;
  // A column of text with at most this many values splits each line into one per value.
  const MAX_GROUPS = 8;

  function wire() {
    const form = document.querySelector("form#query");
    if (form === null || form.dataset.wired) {
      return;
    }
    form.dataset.wired = "1";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      run(form);
    });
    form.elements.query.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    for (const button of document.querySelectorAll("button[data-table]")) {
      button.addEventListener("click", () => {
        form.elements.query.value = "SELECT * FROM " + button.dataset.table + " LIMIT 100";
        form.elements.query.focus();
      });
    }
  }

  async function run(form) {
    const status = document.getElementById("query-status");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    status.textContent = "running…";
    const started = performance.now();
    let response = null;
    let body = null;
    try {
      response = await fetch("/sql", {
        method: "POST",
        headers: { ...window.millrace.headers(), "Content-Type": "application/json" },
        body: JSON.stringify({
          query: form.elements.query.value,
          limit: Number(form.elements.limit.value),
        }),
        cache: "no-store",
      });
      body = await response.json();
    } catch (error) {
      body = null;
    } finally {
      button.disabled = false;
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    if (response !== null && response.ok && body !== null) {
      status.textContent = "answered in " + seconds + " s";
      showAnswer(body);
      return;
    }
    status.textContent = "failed after " + seconds + " s";
    showError(
      body?.error ?? {
        message: response === null ? "the service did not answer" : "status " + response.status,
        hint: "check that millrace serve is running",
      },
    );
  }

  function showError(error) {
    document.getElementById("query-answer").hidden = true;
    const box = document.getElementById("query-error");
    box.querySelector(".message").textContent = error.message;
    const hint = box.querySelector(".hint");
    hint.textContent = error.hint ?? "";
    hint.hidden = !error.hint;
    box.hidden = false;
  }

  function showAnswer(answer) {
    document.getElementById("query-error").hidden = true;
    const rows = answer.rows.length;
    document.getElementById("query-summary").textContent =
      rows + (rows === 1 ? " row" : " rows") + " · " + answer.engine;
    const table = document.getElementById("query-table");
    const head = document.createElement("tr");
    for (const column of answer.columns) {
      head.append(html("th", {}, column));
    }
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(
      ...answer.rows.map((row) => {
        const line = document.createElement("tr");
        for (const column of answer.columns) {
          const value = row[column];
          const kind = value === null ? "null" : typeof value === "number" ? "number" : "";
          line.append(html("td", kind ? { class: kind } : {}, cellText(value)));
        }
        return line;
      }),
    );
    const drawn = chart(answer);
    document.getElementById("query-chart").replaceChildren(...(drawn ? [drawn] : []));
    document.getElementById("query-answer").hidden = false;
  }

  function cellText(value) {
    if (value === null) {
      return "NULL";
    }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  // The answer's lines over its time column: one per column of numbers, and per value of
  // the first column of text that has few; null when there is nothing to draw.
  function chart(answer) {
    const time = answer.time_column;
    if (time === null) {
      return null;
    }
    const numeric = answer.columns.filter((c) => c !== time && every(answer.rows, c, isNumber));
    if (numeric.length === 0) {
      return null;
    }
    const group = answer.columns.find(
      (c) =>
        c !== time &&
        !numeric.includes(c) &&
        every(answer.rows, c, (v) => typeof v === "string") &&
        new Set(answer.rows.map((row) => row[c])).size <= MAX_GROUPS,
    );
    const lines = new Map();
    for (const row of answer.rows) {
      const at = Date.parse(row[time]);
      for (const column of numeric) {
        const label = group === undefined ? column : column + " · " + (row[group] ?? "NULL");
        if (Number.isNaN(at) || !isNumber(row[column])) {
          continue;
        }
        if (!lines.has(label) && lines.size < MAX_LINES) {
          lines.set(label, []);
        }
        lines.get(label)?.push([at, row[column]]);
      }
    }
    return lines.size === 0 ? null : draw(time, lines);
  }

  function draw(time, lines) {
    const points = [...lines.values()].flat();
    const since = Math.min(...points.map(([at]) => at));
    const until = Math.max(...points.map(([at]) => at));
    const low = Math.min(0, ...points.map(([, value]) => value));
    let high = Math.max(0, ...points.map(([, value]) => value));
    high = high > low ? high : low + 1;
    const plotW = WIDTH - LEFT - RIGHT;
    const bottom = TOP + PLOT_H;
    const perRow = Math.floor(plotW / LEGEND_W);
    const height = bottom + 24 + Math.ceil(lines.size / perRow) * 16;
    const x = (at) => LEFT + ((at - since) / Math.max(1, until - since)) * plotW;
    const y = (value) => bottom - ((value - low) / (high - low)) * PLOT_H;

    const title = "over " + time;
    const svg = svgNode("svg", {
      class: "chart query-chart",
      viewBox: `0 0 ${WIDTH} ${height}`,
      width: WIDTH,
      height,
      role: "img",
      "aria-label": title,
      "data-lines": lines.size,
    });
    svg.append(
      svgNode("text", { class: "title", x: LEFT, y: 14 }, title),
      svgNode("line", { class: "axis", x1: LEFT, y1: bottom, x2: WIDTH - RIGHT, y2: bottom }),
      svgNode("line", { class: "axis", x1: LEFT, y1: TOP, x2: LEFT, y2: bottom }),
      svgNode("text", { x: LEFT - 4, y: TOP + 4, "text-anchor": "end" }, figure(high)),
      svgNode("text", { x: LEFT - 4, y: bottom, "text-anchor": "end" }, figure(low)),
      svgNode("text", { x: LEFT, y: bottom + 14 }, clock(since)),
      svgNode("text", { x: WIDTH - RIGHT, y: bottom + 14, "text-anchor": "end" }, clock(until)),
    );
    [...lines.entries()].forEach(([label, line], n) => {
      const colour = "series-" + (n % COLOURS);
      line.sort((a, b) => a[0] - b[0]);
      const polyline = svgNode("polyline", {
        class: colour,
        "data-points": line.length,
        points: line.map(([at, value]) => `${x(at).toFixed(1)},${y(value).toFixed(1)}`).join(" "),
      });
      polyline.append(svgNode("title", {}, label));
      svg.append(polyline);
      for (const [at, value] of line) {
        const dot = svgNode("circle", {
          class: colour,
          cx: x(at).toFixed(1),
          cy: y(value).toFixed(1),
          r: 2,
        });
        dot.append(svgNode("title", {}, label + ": " + value + " at " + clock(at)));
        svg.append(dot);
      }
      const legendX = LEFT + (n % perRow) * LEGEND_W;
      const legendY = bottom + 34 + Math.floor(n / perRow) * 16;
      svg.append(svgNode("text", { class: colour, x: legendX, y: legendY, stroke: "none" }, label));
    });
    return svg;
  }

  function every(rows, column, test) {
    const values = rows.map((row) => row[column]).filter((value) => value !== null);
    return values.length > 0 && values.every(test);
  }

  function isNumber(value) {
    return typeof value === "number" && Number.isFinite(value);
  }

  function figure(value) {
    const size = Math.abs(value);
    if (size >= 1e6) {
      return (value / 1e6).toFixed(1) + "M";
    }
    if (size >= 1e4) {
      return (value / 1e3).toFixed(1) + "k";
    }
    return Number.isInteger(value) ? String(value) : value.toFixed(2);
  }

  function clock(at) {
    return new Date(at).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function html(name, attributes, text) {
    const node = document.createElement(name);
    return fill(node, attributes, text);
  }

  function svgNode(name, attributes, text) {
    return fill(document.createElementNS(SVG, name), attributes, text);
  }

  function fill(node, attributes, text) {
    for (const [key, value] of Object.entries(attributes)) {
      node.setAttribute(key, String(value));
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  document.addEventListener("millrace:main", wire);
  wire();
})();
