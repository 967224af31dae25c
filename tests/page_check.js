// The page check, run inside a rendered study page (see page_check.py): what a reader of the
// page would trip over, as findings {check, where, detail}, written as JSON into a
// pre element (id lisa-page-check) once the page and its iframes (bokeh) have drawn.
(function () {
  "use strict";
  const OPTIONS = window.LISA_PAGE_CHECK_OPTIONS || {};
  const findings = [];
  // what the check looked at: a check that saw nothing proves nothing
  const seen = {iframes: 0, svg_figures: 0, svg_texts: 0, bokeh_plots: 0, bokeh_axes: 0, tables: 0,
                figure_cells: 0};
  const add = (check, where, detail) => findings.push({check, where, detail});
  const outputs = () => Array.from(document.querySelectorAll(".jp-OutputArea-output"));
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  // a unit in parentheses or brackets, a %, a rate (records/s) or a word that is its own unit
  const UNIT = /\([^)]*\S[^)]*\)|\[[^\]]*\S[^\]]*\]|%|\w\/s\b|\b(IOPS|TPS|RPS)\b|\b(fraction|share|count|number|ratio|per cent)\b/i;
  const UNITLESS_AXIS = /^(cpu|cpus|cpu id|iteration|clients?|jobs?|tasks?|finding|variant|workload|load|scope)$/i;
  const NUMBER = /^[−\-+]?\d[\d,]*(\.\d+)?([eE][+\-]?\d+)?%?$/;
  const SCIENTIFIC = /\d(\.\d+)?[eE][+\-]?\d+|×\s*10/;
  const RAW_ID = /\b[a-z][a-z0-9]*(_[a-z0-9]+)+\b/;
  const allowed = new Set(OPTIONS.allowed_header_words || []);
  const rawIdentifier = (text) => {
    const m = text.match(new RegExp(RAW_ID.source, "g")) || [];
    return m.filter((w) => !allowed.has(w));
  };
  const tooLong = (text) => {
    const digits = text.replace(/[,\s]/g, "").match(/^\D?(\d+)(\.\d+)?\D?$/);
    return digits && digits[1].length > 5;
  };

  // --- clipped iframes and containers -------------------------------------------------------
  function checkClipping() {
    document.querySelectorAll("iframe").forEach((frame, i) => {
      const doc = frame.contentDocument;
      seen.iframes += 1;
      if (!doc || !doc.documentElement) {
        add("clipped", `iframe ${i}`, "its document cannot be read");
        return;
      }
      const inner = doc.documentElement, body = doc.body || inner;
      const height = Math.max(inner.scrollHeight, body.scrollHeight);
      const width = Math.max(inner.scrollWidth, body.scrollWidth);
      if (height > frame.clientHeight + 2 || width > frame.clientWidth + 2) {
        add("clipped", `iframe ${i} (${clean(doc.title) || "untitled"})`,
            `content ${width}x${height} px in a ${frame.clientWidth}x${frame.clientHeight} px frame`);
      }
    });
    outputs().forEach((out) => {
      [out, ...out.querySelectorAll("*")].forEach((el) => {
        if (el.closest("svg") && el.tagName.toLowerCase() !== "svg") return;
        const style = getComputedStyle(el);
        const hides = (v) => v === "hidden" || v === "auto" || v === "scroll" || v === "clip";
        const over = (hides(style.overflowX) && el.scrollWidth > el.clientWidth + 2)
          || (hides(style.overflowY) && el.scrollHeight > el.clientHeight + 2);
        if (over) {
          add("clipped", describe(el), `content ${el.scrollWidth}x${el.scrollHeight} px shown in ` +
              `${el.clientWidth}x${el.clientHeight} px`);
        }
      });
      // a figure wider than the page column
      out.querySelectorAll("img, svg").forEach((fig) => {
        if (fig.parentElement.closest("svg")) return;
        const box = fig.getBoundingClientRect(), column = out.getBoundingClientRect();
        if (box.right > column.right + 2 && box.width > 0) {
          add("clipped", describe(fig), `figure ${Math.round(box.width)} px wide in a ` +
              `${Math.round(column.width)} px column`);
        }
      });
    });
  }

  function describe(el) {
    const cell = el.closest(".jp-Cell");
    const cells = Array.from(document.querySelectorAll(".jp-Cell"));
    const tag = el.tagName.toLowerCase() + (el.className && typeof el.className === "string"
      ? "." + el.className.trim().split(/\s+/).slice(0, 2).join(".") : "");
    return cell ? `cell ${cells.indexOf(cell)} ${tag}` : tag;
  }

  // --- matplotlib SVG figures: text boxes, axes, legends ---------------------------------------
  function textOf(group) {
    for (const node of group.childNodes) {
      if (node.nodeType === Node.COMMENT_NODE) return clean(node.nodeValue);
    }
    return clean(group.textContent);
  }

  function glyphBoxes(group) {
    const glyphs = group.querySelectorAll("use, path, text");
    const boxes = [];
    glyphs.forEach((g) => {
      const r = g.getBoundingClientRect();
      if (r.width > 0.5 && r.height > 0.5) boxes.push(r);
    });
    return boxes;
  }

  function checkSvg(svg, where) {
    const groups = Array.from(svg.querySelectorAll('g[id^="text_"]'))
      .filter((g) => !g.parentElement.closest('g[id^="text_"]'));
    const items = groups.map((g) => ({text: textOf(g), boxes: glyphBoxes(g)}));
    seen.svg_figures += 1;
    seen.svg_texts += items.length;
    for (let a = 0; a < items.length; a++) {
      for (let b = a + 1; b < items.length; b++) {
        let hit = false;
        for (const p of items[a].boxes) {
          for (const q of items[b].boxes) {
            // glyphs closer than a pixel touch on the page: each box grows by half a pixel
            const w = Math.min(p.right, q.right) - Math.max(p.left, q.left) + 1;
            const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) + 1;
            if (w > 0 && h > 0) { hit = true; break; }
          }
          if (hit) break;
        }
        if (hit) add("overlapping text", where, `"${items[a].text}" overlaps "${items[b].text}"`);
      }
    }
    svg.querySelectorAll('g[id^="matplotlib.axis_"]').forEach((axis) => {
      const ticks = Array.from(axis.querySelectorAll('g[id^="xtick_"] g[id^="text_"], g[id^="ytick_"] g[id^="text_"]'))
        .map(textOf).filter((t) => t);
      const label = Array.from(axis.children).filter((c) => /^text_/.test(c.id)).map(textOf).join(" ");
      checkAxis(where, label, ticks);
    });
    svg.querySelectorAll('g[id^="legend_"]').forEach((legend) => {
      const entries = Array.from(legend.querySelectorAll('g[id^="text_"]')).map(textOf);
      checkLegend(where, entries);
    });
    svg.querySelectorAll('g[id^="text_"]').forEach((g) => {
      const text = textOf(g);
      if (SCIENTIFIC.test(text)) add("unreadable number", where, `"${text}" in scientific notation`);
    });
  }

  function checkAxis(where, label, ticks) {
    const numeric = ticks.length > 0 && ticks.every((t) => NUMBER.test(t.replace(/−/g, "-")));
    if (!numeric) return;
    if (!label) {
      add("axis without unit", where, `numeric axis (${ticks.slice(0, 3).join(", ")}, ...) has no label`);
    } else if (/\bstate\b/i.test(label)) {
      add("idle states by number", where, `axis "${label}" shows states ${ticks.join(", ")}`);
    } else if (!UNIT.test(label) && !UNITLESS_AXIS.test(label)) {
      add("axis without unit", where, `axis "${label}" has no unit`);
    }
    ticks.filter(tooLong).forEach((t) => add("unreadable number", where,
      `tick "${t}" on "${label}": more than 5 digits, use a larger unit`));
  }

  function checkLegend(where, entries) {
    const bare = entries.filter((e) => /^\d+$/.test(e));
    if (entries.length && bare.length === entries.length) {
      add("legend by number", where, `legend entries ${entries.join(", ")} are bare numbers`);
    }
  }

  // --- bokeh documents (in iframes): axes, legends, tick formats ---------------------------------
  function checkBokeh(win, where) {
    const Bokeh = win.Bokeh;
    if (!Bokeh || !Bokeh.documents) return;
    Bokeh.documents.forEach((doc) => {
      const models = Array.from(doc.all_models || []);
      models.filter((m) => m.type === "Figure" || m.type === "Plot").forEach((plot) => {
        const title = clean(plot.title && plot.title.text) || "untitled plot";
        seen.bokeh_plots += 1;
        const sides = [["below", plot.x_range], ["above", plot.x_range], ["left", plot.y_range],
                       ["right", plot.y_range]];
        sides.forEach(([side, range]) => (plot[side] || []).forEach((axis) => {
          if (!/Axis$/.test(axis.type) || axis.type === "CategoricalAxis" || !axis.visible) return;
          seen.bokeh_axes += 1;
          const label = clean(typeof axis.axis_label === "string" ? axis.axis_label : "");
          if (!label) {
            add("axis without unit", `${where}: ${title}`, `${side} axis has no label`);
          } else if (/\bstate\b/i.test(label) && !axis.major_label_overrides) {
            add("idle states by number", `${where}: ${title}`, `axis "${label}" shows state numbers`);
          } else if (!UNIT.test(label) && !UNITLESS_AXIS.test(label)) {
            add("axis without unit", `${where}: ${title}`, `${side} axis "${label}" has no unit`);
          }
          const f = axis.formatter;
          const top = Math.max(Math.abs(range.start || 0), Math.abs(range.end || 0));
          if (f && f.type === "BasicTickFormatter" && f.use_scientific && top >= 10 ** f.power_limit_high) {
            add("unreadable number", `${where}: ${title}`,
                `axis "${label}" reaches ${top.toPrecision(3)}: shown in scientific notation`);
          } else if (top >= 1e5 && (!f || f.type === "BasicTickFormatter")) {
            add("unreadable number", `${where}: ${title}`,
                `axis "${label}" reaches ${Math.round(top)}: more than 5 digits, use a larger unit`);
          }
        }));
      });
      models.filter((m) => m.type === "Legend").forEach((legend) => {
        const entries = (legend.items || []).map((item) => {
          const l = item.label;
          return clean(l == null ? "" : typeof l === "string" ? l : (l.value != null ? String(l.value) : ""));
        }).filter((e) => e);
        checkLegend(where, entries);
      });
    });
  }

  // --- tables ------------------------------------------------------------------------------------
  function checkTables() {
    outputs().forEach((out) => out.querySelectorAll("table").forEach((table) => {
      const where = describe(table);
      seen.tables += 1;
      const heads = Array.from(table.querySelectorAll("thead th, tr:first-child th"));
      heads.forEach((th) => {
        const text = clean(th.textContent);
        const raw = rawIdentifier(text);
        if (raw.length) add("raw identifier", where, `header "${text}" (${raw.join(", ")})`);
        const units = text.match(/\([^)]*\)|\[[^\]]*\]/g) || [];
        if (units.length > 1 && !/\(%\)$/.test(text)) add("unit twice", where, `header "${text}"`);
      });
      const rowHeads = Array.from(table.querySelectorAll("tbody tr")).map((tr) => tr.querySelector("th"));
      if (rowHeads.length > 1 && rowHeads.every((th) => th && /^\d+$/.test(clean(th.textContent)))) {
        const values = rowHeads.map((th) => Number(clean(th.textContent)));
        if (values.every((v, i) => v === values[0] + i)) {
          add("bare index", where, `rows numbered ${values[0]}..${values[values.length - 1]}`);
        }
      }
      checkTableCells(table, where);
      table.querySelectorAll("th, td").forEach((cell) => {
        const text = clean(cell.textContent);
        const rows = Array.from(cell.closest("tbody") ? [cell] : []);
        if (rows.length && /(^|\s)[-+]?\d(\.\d+)?e[+-]?\d+\b/.test(text)) {
          add("unreadable number", where, `cell "${text}" in scientific notation`);
        }
        const long = rows.length && text.match(/\d\.(\d{7,})/);
        if (long) add("unreadable number", where, `cell "${text}": ${long[1].length} digits after the point`);
        if (rows.length && cell.tagName === "TH") {
          const raw = rawIdentifier(text);
          if (raw.length) add("raw identifier", where, `row header "${text}" (${raw.join(", ")})`);
        }
      });
    }));
  }

  // two parenthesised qualifiers side by side: "energy (board model) (J)" reads "energy (board model, J)"
  const TWO_UNITS = /\([^()]*\)\s*\([^()]*\)/;
  // an interval reported as unbounded must say why ("unbounded: too few runs")
  const BARE_UNBOUNDED = /^unbounded\W*$/i;
  // separators a name may wrap at; a line break anywhere else splits a word
  const SEPARATORS = /[\s\-_/.,:=+|]+/;

  function brokenWord(cell) {
    // a word spanning two line boxes: its range has client rects on different lines
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode, text = node.nodeValue;
      const re = new RegExp(SEPARATORS.source, "g");
      let start = 0, m;
      const words = [];
      while ((m = re.exec(text)) !== null) {
        if (m.index > start) words.push([start, m.index]);
        start = m.index + m[0].length;
      }
      if (start < text.length) words.push([start, text.length]);
      for (const [a, b] of words) {
        if (b - a < 2) continue;
        const range = document.createRange();
        range.setStart(node, a);
        range.setEnd(node, b);
        const tops = new Set(Array.from(range.getClientRects()).filter((r) => r.width > 0)
          .map((r) => Math.round(r.top)));
        if (tops.size > 1) return text.slice(a, b);
      }
    }
    return null;
  }

  function checkTableCells(table, where) {
    const cells = Array.from(table.querySelectorAll("th, td"));
    cells.forEach((cell) => {
      const text = clean(cell.textContent);
      // a label cell (a metric's name); a value cell may qualify its number twice ("12 (+5 %) (n=3)")
      const label = /^[A-Za-z]/.test(text);
      if (label && !cell.closest("thead") && TWO_UNITS.test(text) && !/\(%\)$/.test(text)) {
        add("unit twice", where, `cell "${text}"`);
      }
      if (BARE_UNBOUNDED.test(text)) add("unbounded without reason", where, `cell "${text}" does not say why`);
      const header = cell.tagName === "TH" || cell.classList.contains("l");
      const word = header && brokenWord(cell);
      if (word) add("broken word", where, `"${word}" is broken across lines in "${text}"`);
    });
    // a mean cell ("12.3 ± 1.2", "4.5 (gmean)") is of the kind it names, else of its header's (amean)
    const headKind = (clean(Array.from(table.querySelectorAll("thead th")).map((th) => th.textContent).join(" "))
      .match(/\b([ahg]mean)\b/i) || [null, "amean"])[1].toLowerCase();
    const kinds = new Set(cells.filter((c) => c.tagName === "TD" && /±|\([ahg]mean\)/i.test(c.textContent))
      .map((c) => (clean(c.textContent).match(/\(([ahg]mean)\)/i) || [null, headKind])[1].toLowerCase()));
    // a row label may name its kind too ("hmean read_iops [IOPS]", a report's Markdown comparison)
    cells.forEach((c) => { const m = clean(c.textContent).match(/^([ahg]mean) /i); if (m) kinds.add(m[1].toLowerCase()); });
    if (kinds.size > 1) add("mixed means", where, `one table shows ${Array.from(kinds).sort().join(" and ")}`);
    const heads = clean(Array.from(table.querySelectorAll("thead th")).map((th) => th.textContent).join(" "));
    if (/\bknobs?\b/i.test(heads)) {
      const seenRows = new Set();
      table.querySelectorAll("tbody tr").forEach((tr) => {
        const row = Array.from(tr.children).map((c) => clean(c.textContent)).join(" | ");
        if (seenRows.has(row)) add("duplicated rows", where, `row "${row}" twice`);
        seenRows.add(row);
        Array.from(tr.children).forEach((c) => {
          const items = clean(c.textContent).split(/\s*[,;]\s*/).filter((x) => x);
          const twice = items.filter((x, i) => items.indexOf(x) !== i);
          if (twice.length) add("duplicated rows", where, `"${twice[0]}" twice in "${clean(c.textContent)}"`);
        });
      });
    }
  }

  // --- a study's conclusion still the template's placeholder --------------------------------
  // `lisa-ext study new` writes a conclusion cell (tagged conclusion) holding "TODO conclusion:";
  // the RFC studies conclude in their narrative and have no such cell
  function checkConclusion() {
    document.querySelectorAll(".jp-MarkdownCell").forEach((cell) => {
      const text = clean(cell.textContent);
      if (/\bTODO conclusion\b/i.test(text)) {
        add("conclusion placeholder", describe(cell), `the conclusion is still the template's: ${text.slice(0, 80)}`);
      }
    });
    document.querySelectorAll(".celltag_conclusion").forEach((cell) => {
      if (!clean(cell.textContent).replace(/^#*\s*conclusion\b¶?/i, "").trim()) {
        add("conclusion placeholder", describe(cell), "the conclusion cell is empty");
      }
    });
  }

  // a name in an output's text (a text table) broken mid-word, as JupyterLab's break-all does
  function checkBrokenText() {
    outputs().forEach((out) => out.querySelectorAll("pre").forEach((pre) => {
      if (pre.closest(".jp-Cell-inputWrapper")) return;
      const word = brokenWord(pre);
      if (word) add("broken word", describe(pre), `"${word}" is broken across lines in an output's text`);
    }));
  }

  // --- code cells shown on a page meant to hide them -------------------------------------------
  function checkHiddenCode() {
    if (OPTIONS.show_code) return;
    document.querySelectorAll(".jp-CodeCell .jp-Cell-inputWrapper, .jp-CodeCell .jp-InputArea").forEach((input) => {
      if (input.closest(".jp-Cell-inputWrapper") !== input && input.closest(".jp-Cell-inputWrapper")) return;
      const box = input.getBoundingClientRect();
      const text = clean(input.textContent);
      if (box.height > 0 && text) add("code shown", describe(input), `code cell shown: ${text.slice(0, 80)}`);
    });
  }

  // --- figure cells that showed nothing --------------------------------------------------------
  // a cell tagged "figure" or calling show_figure must show an image, an SVG or a frame: a figure
  // built but never displayed (a value that was not the cell's last expression) leaves no trace
  const FIGURE_CALL = /\bshow_figure\s*\(/;
  function checkFigureCells() {
    document.querySelectorAll(".jp-CodeCell").forEach((cell) => {
      const input = cell.querySelector(".jp-Cell-inputWrapper");
      const code = input ? input.textContent : "";
      const tagged = cell.classList.contains("celltag_figure");
      if (!tagged && !FIGURE_CALL.test(code)) return;
      seen.figure_cells += 1;
      if (!cell.querySelector(".jp-OutputArea-output img, .jp-OutputArea-output svg, .jp-OutputArea-output iframe")) {
        const line = clean(code.split("\n").find((l) => FIGURE_CALL.test(l)) || code).slice(0, 120);
        add("missing figure", describe(cell), `${tagged ? "a cell tagged figure" : "a show_figure cell"} ` +
            `rendered no image, SVG or frame: ${line}`);
      }
    });
  }

  // --- noise, parameters, smoke banner ---------------------------------------------------------
  function checkNoise() {
    document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').forEach((el) => {
      add("log box", describe(el), clean(el.textContent).slice(0, 160));
    });
    outputs().forEach((out) => {
      const text = out.innerText || "";
      const m = text.match(/Traceback|\w*Warning:|\bWARNING\b|\bERROR\b/);
      if (m) add("log box", describe(out), `shows "${m[0]}": ${clean(text).slice(0, 160)}`);
    });
    const injected = document.querySelectorAll(".celltag_injected-parameters .jp-Cell-inputWrapper");
    const defaults = document.querySelectorAll(".celltag_parameters .jp-Cell-inputWrapper");
    if (injected.length && defaults.length) {
      add("duplicated parameters", "page", "both the default and the injected parameter cells are shown");
    }
  }

  function checkSmokeBanner() {
    if (!OPTIONS.smoke) return;
    const phrase = /check(s)? the pipeline/i;
    const firstTable = document.querySelector(".jp-OutputArea-output table, .jp-OutputArea-output svg, iframe");
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    let found = null;
    while (walker.nextNode()) {
      if (phrase.test(walker.currentNode.nodeValue)) { found = walker.currentNode; break; }
    }
    if (!found) {
      add("smoke banner", "page", "a smoke page must say that its numbers check the pipeline");
    } else if (firstTable && (firstTable.compareDocumentPosition(found) & Node.DOCUMENT_POSITION_FOLLOWING)) {
      add("smoke banner", "page", "the smoke banner comes after the first table or figure");
    }
  }

  // --- the regions a screenshot crops: the first RFC table, the first mechanism figure ---------
  function regions() {
    const rect = (el) => {
      const r = el.getBoundingClientRect();
      return [Math.round(r.left + scrollX), Math.round(r.top + scrollY), Math.round(r.width), Math.round(r.height)];
    };
    const out = {tables: [], figures: [], headings: []};
    document.querySelectorAll(".jp-OutputArea-output table").forEach((t) => {
      const caption = t.querySelector("caption");
      out.tables.push({rect: rect(t), caption: clean(caption && caption.textContent).slice(0, 120)});
    });
    document.querySelectorAll(".jp-OutputArea-output svg, .jp-OutputArea-output img, .jp-OutputArea-output iframe")
      .forEach((f) => { if (!f.parentElement.closest("svg")) out.figures.push({rect: rect(f), tag: f.tagName.toLowerCase()}); });
    document.querySelectorAll("h1, h2").forEach((h) => out.headings.push({rect: rect(h), text: clean(h.textContent)}));
    return out;
  }

  function run() {
    try {
      checkClipping();
      document.querySelectorAll(".jp-OutputArea-output svg").forEach((svg) => {
        if (!svg.parentElement.closest("svg")) checkSvg(svg, describe(svg));
      });
      document.querySelectorAll("iframe").forEach((frame, i) => {
        if (frame.contentWindow) checkBokeh(frame.contentWindow, `${describe(frame)} iframe ${i}`);
      });
      checkTables();
      checkFigureCells();
      checkHiddenCode();
      checkBrokenText();
      checkConclusion();
      checkNoise();
      checkSmokeBanner();
    } catch (e) {
      add("check failed", "page", String(e && e.stack || e));
    }
    const pre = document.createElement("pre");
    pre.id = "lisa-page-check";
    pre.textContent = JSON.stringify({findings, seen, regions: regions(), height: document.documentElement.scrollHeight});
    document.body.appendChild(pre);
  }

  window.addEventListener("load", () => setTimeout(run, OPTIONS.settle_ms || 3000));
})();
