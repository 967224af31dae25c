"""The page check finds what it is meant to: one page with every defect a reader tripped over on
the study pages (a clipped frame, overlapping figure text, an axis in kHz with 7-digit ticks and
no unit, idle states by number, a warning box, snake_case headers, a bare index, both parameter
cells, a smoke page without its banner, a code cell on a page meant to hide code, "(x) (y)" units
in a cell, a variant name broken mid-word, a bare "unbounded" interval, an sd of 17 decimals,
hmean beside amean, a knob read back twice), and the same page fixed, which it must pass."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import pytest

import page_check
from lisa_ext import study
from lisa_ext.report.figures import svg_text


def _figure(bad: bool) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(5, 4))
    if bad:
        top.plot([0, 1, 2], [408000, 1416000, 1416000])
        top.set_ylabel("frequency")
        top.set_title("restart frequency")
        for state in (0, 1, 2):
            bottom.bar([state], [30 + state], label=str(state))
        bottom.set_xlabel("idle state")
        bottom.legend()
        # a panel's label written over another one's, as idle-gating's panel titles were
        bottom.text(0.2, 31, "after marked tasks")
        bottom.text(0.4, 31.5, "after the others")
    else:
        top.plot([0, 1, 2], [408, 1416, 1416])
        top.set_ylabel("frequency (MHz)")
        top.set_xlabel("time (ms)")
        top.set_title("restart frequency")
        for state, name in enumerate(("WFI", "cpu-sleep", "cluster-sleep")):
            bottom.bar([name], [30 + state], label=name)
        bottom.set_ylabel("% of idle time")
        bottom.legend()
        fig.tight_layout()
    return svg_text(fig)


def _tables(bad: bool) -> str:
    """A cover-letter-like table and a knobs table, as the study pages showed them or fixed."""
    # a narrow header cell: break-all breaks the name anywhere, the default only at its dashes
    wrap = "word-break:break-all" if bad else "overflow-wrap:normal"
    name = "no-run-to-parity"
    rows = ([("energy (board model) (J)", "3.1 ± 0.2 (hmean)", "unbounded"),
             ("request latency (ms)", "2.0 ± 0.00000000000000178", "-3.0 … +4.0 %")] if bad else
            [("energy (board model, J)", "3.1 ± 0.2", "unbounded: too few runs"),
             ("request latency (ms)", "2.0 ± 0.1", "-3.0 … +4.0 %")])
    body = "".join(f'<tr><th style="width:40px;max-width:40px;{wrap}">{name}</th>'
                   + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    cover = ("<table><thead><tr><th>Variant</th><th>Metric</th><th>Mean ± sd</th>"
             f"<th>95 % CI of the change</th></tr></thead><tbody>{body}</tbody></table>")
    knobs = ([("base", "timing", "faithful"), ("base", "timing", "faithful"),
              ("base", "scaling governor", "schedutil, schedutil")] if bad else
             [("base", "/sys/module/lisa_emu_cpuidle/parameters/timing", "faithful"),
              ("base", "/sys/module/lisa_emu_cpufreq/parameters/timing", "faithful"),
              ("base", "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor", "schedutil")])
    knob_rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in knobs)
    knob_table = ("<table><thead><tr><th>Variant</th><th>Knob</th><th>Read back</th></tr></thead>"
                  f"<tbody>{knob_rows}</tbody></table>")
    return f'<div class="jp-OutputArea-output">{cover}</div><div class="jp-OutputArea-output">{knob_table}</div>'


def _page(bad: bool) -> str:
    frame = (f'<div style="height:{900 if bad else 100}px">plot</div>')
    iframe = f'<iframe srcdoc="{html.escape(frame)}" style="width:100%;height:300px;border:0"></iframe>'
    table = pd.DataFrame({"meter_power_mw": [1.0, 2.0]} if bad else {"meter power (mW)": [1.0, 2.0]},
                         index=pd.RangeIndex(2) if bad else pd.Index(["menu", "teo"], name="variant"))
    out = ['<div class="jp-Cell celltag_parameters"><div class="jp-Cell-inputWrapper">campaign_dir = "data/x"</div></div>']
    if bad:
        out.append('<div class="jp-Cell celltag_injected-parameters"><div class="jp-Cell-inputWrapper">'
                   'campaign_dir = "data/x-smoke"</div></div>')
    else:
        out.append('<div class="jp-OutputArea-output"><p><b>Smoke run:</b> the numbers check the pipeline.</p></div>')
    out.append(f'<div class="jp-OutputArea-output">{table.to_html()}</div>')
    out.append(_tables(bad))
    if bad:
        out.append('<div class="jp-Cell jp-CodeCell"><div class="jp-Cell-inputWrapper">'
                   '<pre>page.status()</pre></div></div>')
    out.append(f'<div class="jp-OutputArea-output">{_figure(bad)[_figure(bad).index("<svg"):]}</div>')
    out.append(f'<div class="jp-OutputArea-output">{iframe}</div>')
    if bad:
        out.append('<div class="jp-OutputArea-output" data-mime-type="application/vnd.jupyter.stderr">'
                   '<pre>RuntimeWarning: Precision loss occurred in moment calculation</pre></div>')
    return "<html><body>" + "".join(out) + "</body></html>"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pages")
    found = {}
    for bad in (True, False):
        path = tmp / f"{'bad' if bad else 'good'}.html"
        path.write_text(_page(bad), encoding="utf-8")
        found[bad] = page_check.check_page(path, smoke=True)
    return found


def test_every_defect_is_found(checked):
    report = checked[True].report()
    kinds = {f["check"] for f in checked[True].findings}
    assert kinds == {"clipped", "overlapping text", "axis without unit", "unreadable number",
                     "idle states by number", "legend by number", "raw identifier", "bare index", "log box",
                     "duplicated parameters", "smoke banner", "code shown", "unit twice", "broken word",
                     "unbounded without reason", "mixed means", "duplicated rows"}, report
    assert "x916 px in a 1264x300 px frame" in report, report  # 900 px of content and the margins
    assert '"after marked tasks" overlaps "after the others"' in report, report
    assert '"1e6" in scientific notation' in report, report  # 1,416,000 kHz: matplotlib's offset
    assert 'cell "energy (board model) (J)"' in report, report
    assert 'cell "2.0 ± 0.00000000000000178": 17 digits after the point' in report, report
    assert 'in "no-run-to-parity"' in report, report
    assert 'row "base | timing | faithful" twice' in report and '"schedutil" twice' in report, report
    assert "one table shows amean and hmean" in report, report
    assert "code cell shown: page.status()" in report, report


def test_the_fixed_page_passes(checked):
    assert checked[False].seen["svg_figures"] == 1 and checked[False].seen["iframes"] == 1
    assert not checked[False].findings, checked[False].report()


def test_a_shown_page_that_draws_after_loading_fits_its_frame(tmp_path):
    """study.show_page's frame follows its page as bokeh's do: html and body at 100 % of the
    frame, the plot drawn after the page loaded and taller than the frame's first height."""
    shown = tmp_path / "plot.html"
    shown.write_text(
        "<!DOCTYPE html><html><head><style>html, body {display: flow-root; height: 100%; margin: 0}"
        "</style></head><body><script>window.addEventListener('load', () => setTimeout(() => {"
        "const plot = document.createElement('div'); plot.style.height = '1200px';"
        "plot.textContent = 'plot'; document.body.appendChild(plot)}, 500))</script></body></html>",
        encoding="utf-8")
    page = tmp_path / "page.html"
    page.write_text('<html><body><div class="jp-OutputArea-output">'
                    f'{study.show_page(shown, height=900).data}</div></body></html>', encoding="utf-8")
    found = page_check.check_page(page)
    assert found.seen["iframes"] == 1
    assert [f for f in found.findings if f["check"] == "clipped"] == []
