"""Studies: a campaign spec plus a notebook, run and reported in one step.

A study is ``notebooks/<name>.yml`` (the campaign) next to ``notebooks/<name>.ipynb``
(narrative and parameters). ``lisa-ext study run NAME`` runs (or resumes) the
campaign into ``data/<name>/`` (:func:`~lisa_ext.campaign.runner.run_campaign`), writes
its report into ``data/<name>/report/`` (:mod:`lisa_ext.report`, with the spec's
``report:`` settings) and executes the notebook with papermill into
``out/<name>.html``; the notebook reads the report's tables and figures
(:func:`campaign_report`) and writes its own figures beside them. The notebooks
call the helpers below; every computation stays in :mod:`lisa_ext`.

Studies whose spec targets the virtual board need ``lisa-ext vboard up`` first and
take tens of minutes under QEMU TCG; the workqueue study runs on this machine.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import html
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lisa_ext.campaign.runner import RunSummary, SpecChanged, run_campaign
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.layout import REPORT_DIR
from lisa_ext.campaign.store.reader import traced_runs
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import SpecError, UserError
from lisa_ext.kernel.deploy import first_boot_missing
from lisa_ext.lisa_hook import skip_iri_format_checker
from lisa_ext.report.build import TABLE_FILES, ReportOptions, build_report, campaign_metrics
from lisa_ext.report.cover import CoverLetterTable
from lisa_ext.report.explore import explorer_page, use_bokeh
from lisa_ext.report.figures import figure_name, svg_text
from lisa_ext.report.perfetto import perfetto_link
from lisa_ext.report.readable import readable_table
from lisa_ext.stats.cover import cover_table as _cover_frame
from lisa_ext.studies import runs
from lisa_ext.target import CLOCKS, CLOCKS_HELP, first_boot_needs
from lisa_ext.target.timing import TIMINGS, TIMINGS_HELP
from lisa_ext.workbench import campaign_dir, output_dir, workbench_path

__all__ = ["Study", "study_dir", "list_studies", "find_study", "ensure_campaign", "campaign_report",
           "write_report", "comparison_table", "cover_table", "figure_paths", "per_run_analysis",
           "execute_notebook", "NotebookFailed", "run_study", "register", "explore_run", "show_page", "show_figure",
           "readable_table", "repo_path", "export_notebook", "use_bokeh", "check_page_outputs", "first_board_note"]

# Deferred imports in this module: papermill/nbconvert/IPython take seconds; only notebook steps
# need them.



def study_dir() -> Path:
    """``notebooks/`` of the workbench (:mod:`lisa_ext.workbench`)."""
    return workbench_path("notebooks")


@dataclass(frozen=True)
class Study:
    name: str
    spec: Path
    notebook: Path

    def default_data(self, smoke: bool = False) -> Path:
        """``data/<name>``, or ``data/<name>-smoke`` for a smoke run (never mixed with a full one)."""
        return campaign_dir(f"{self.name}-smoke" if smoke else self.name)


def repo_path(path: str | os.PathLike) -> Path:
    """``path``, a relative one taken from the workbench's output directory:
    notebooks name ``data/<study>`` alike whether papermill runs them from there
    or JupyterLab from ``notebooks/``."""
    path = Path(path)
    return path if path.is_absolute() else output_dir() / path


def list_studies(root: Path | None = None) -> list[Study]:
    """Every notebook with a campaign spec of the same name (the quickstart included),
    in ``root`` (default: :func:`study_dir`)."""
    root = study_dir() if root is None else root
    return [Study(nb.stem, nb.with_suffix(".yml"), nb)
            for nb in sorted(root.glob("*.ipynb")) if nb.with_suffix(".yml").is_file()]


def find_study(name: str, root: Path | None = None) -> Study:
    root = study_dir() if root is None else root
    studies = {s.name: s for s in list_studies(root)}
    if name not in studies:
        raise UserError(f"no study {name!r} in {root}: choose one of {', '.join(sorted(studies))}")
    return studies[name]


def ensure_campaign(spec: str | os.PathLike, campaign_dir: str | os.PathLike, *,
                    run: bool = True, progress: bool = True, smoke: bool = False,
                    target: str | os.PathLike | None = None,
                    board_timing: str | None = None, board_clock: str | None = None) -> RunSummary | None:
    """Run (or resume) the campaign into ``campaign_dir`` when ``run`` is true; its summary.

    With ``run=False`` the runs already collected are used as they are (``None``), so a
    notebook can be re-rendered without touching a target. ``smoke``, ``target``,
    ``board_timing`` and ``board_clock`` are :func:`~lisa_ext.campaign.spec.load_spec`'s.
    """
    campaign_dir = Path(campaign_dir)
    if not run:
        if not CampaignStore(campaign_dir).has_runs():
            raise UserError(f"{campaign_dir}: no runs collected yet; run the campaign first "
                            f"(lisa-ext campaign run {spec} --out {campaign_dir})")
        return None
    loaded = load_spec(spec, smoke=smoke, target=target, board_timing=board_timing, board_clock=board_clock)
    return run_campaign(loaded, campaign_dir, resume=True, progress=progress)


def write_report(campaign_dir: str | os.PathLike, out: str | os.PathLike | None = None,
                 **options: Any) -> Path:
    """``lisa-ext report``: tables and figures of a campaign, into ``campaign_dir/report``
    unless ``out``; options as :class:`ReportOptions` (unset ones from the spec's ``report:``)."""
    return build_report(repo_path(campaign_dir),
                        ReportOptions(out=None if out is None else repo_path(out), **options))


def campaign_report(campaign_dir: str | os.PathLike, report_dir: str | os.PathLike | None = None) -> Path:
    """The campaign's report, as ``lisa-ext study run`` wrote it (``campaign_dir/report`` unless
    ``report_dir``): written now, without ``figures.html``, when it is missing or older than
    the campaign's last run (a notebook opened in JupyterLab)."""
    campaign_dir = repo_path(campaign_dir)
    report = repo_path(report_dir) if report_dir is not None else campaign_dir / REPORT_DIR
    readme = report / "README.md"
    if not readme.is_file() or readme.stat().st_mtime < CampaignStore(campaign_dir).last_change():
        write_report(campaign_dir, report, html=False)
    return report


def comparison_table(report_dir: str | os.PathLike, fmt: str = "markdown") -> str:
    """One of the comparison tables a report wrote (mmtests, markdown, lkp, sd, csv)."""
    if fmt not in TABLE_FILES:
        raise UserError(f"table format {fmt!r}: choose one of {', '.join(TABLE_FILES)}")
    path = repo_path(report_dir) / TABLE_FILES[fmt]
    if not path.is_file():
        raise UserError(f"{path}: no report here; write it with lisa-ext report CAMPAIGN_DIR "
                        "(or study.campaign_report)")
    return path.read_text(encoding="utf-8")


def cover_table(campaign_dir: str | os.PathLike, baseline: str | None = None,
                metrics: dict[str, str] | list[str] | tuple[str, ...] | None = None, *, workloads: list[str] | None = None,
                variants: list[str] | None = None, mean: str = "auto", test: str = "welch", alpha: float = 0.05,
                confidence: float = 0.95, traces: bool = False, skip_missing: bool = False) -> CoverLetterTable:
    """The cover-letter table (:mod:`lisa_ext.report.cover`) of a campaign: ``metrics`` the
    metric names to quote, in order, or {metric: label} (None: every one); ``baseline`` None for the campaign's
    first variant; ``traces`` adds the trace-derived metrics (``trace ...``); ``skip_missing``
    leaves out the metrics no run reported. Shown as HTML in a notebook; ``.markdown()`` /
    ``.text()`` for the letter."""
    frame = campaign_metrics(repo_path(campaign_dir), traces=traces)
    names = list(metrics) if metrics is not None else list(dict.fromkeys(frame["metric"]))
    if skip_missing:
        names = [m for m in names if m in set(frame["metric"])] or names
    if baseline is None:
        baseline = next(iter(dict.fromkeys(frame["variant"])))
    table = _cover_frame(frame, baseline, metric_names=names, workloads=workloads, variants=variants,
                         mean=mean, test=test, alpha=alpha, confidence=confidence)
    return CoverLetterTable(table, metrics if isinstance(metrics, dict) else None)


def figure_paths(report_dir: str | os.PathLike, pattern: str = "*") -> list[Path]:
    """The report's PNG figures whose name matches the shell pattern, sorted."""
    return sorted(p for p in (repo_path(report_dir) / "figures").glob("*.png")
                  if fnmatch.fnmatch(p.stem, pattern))


def per_run_analysis(campaign_dir: str | os.PathLike, analysis: str, method: str,
                     **kwargs: Any) -> pd.DataFrame:
    """:func:`lisa_ext.studies.runs.per_run_analysis`, ``campaign_dir`` taken as :func:`repo_path` does."""
    return runs.per_run_analysis(repo_path(campaign_dir), analysis, method, **kwargs)


#: the iframe of :func:`show_page` takes its document's height once the plots are drawn.
#: bokeh's pages hold html and body at 100 % of the frame: a body that size never resizes as
#: plots drawn after loading grow past the frame, so it becomes at least the frame's height
#: and grows with its content (never 0: a frame without height is not drawn, nor observed).
#: Observers are told at rendering frames, which a busy or headless browser may not draw for
#: seconds: the frame is also fitted every 250 ms during the first 10 s.
_FIT_FRAME = ("const f=this,d=f.contentDocument,b=d&&d.body;if(!b)return;"
              "b.style.height='auto';b.style.minHeight='100%';"
              "const fit=()=>{f.style.height=Math.max(b.scrollHeight,"
              "d.documentElement.scrollHeight)+'px'};"
              "fit();new f.contentWindow.ResizeObserver(fit).observe(b);"
              "let n=0;const t=setInterval(()=>{fit();if(++n===40)clearInterval(t)},250)")


def show_page(path: str | os.PathLike, height: int = 900):
    """A standalone HTML page (the explorer's, a report's figures.html) shown in
    the notebook: an iframe holding the page, so its bokeh plots draw and zoom in
    JupyterLab and in the exported study HTML alike, offline. ``height`` is the
    frame's height until the page has drawn; the frame then fits the page."""
    # deferred: see the note under __all__
    from IPython.display import HTML

    text = Path(path).read_text(encoding="utf-8")
    with warnings.catch_warnings():
        # IPython suggests IFrame, which would link the file instead of holding it:
        # the exported study page must carry the plot
        warnings.simplefilter("ignore", UserWarning)
        return HTML(f'<iframe srcdoc="{html.escape(text, quote=True)}" '
                    f'onload="{html.escape(_FIT_FRAME, quote=True)}" '
                    f'style="width:100%;height:{height}px;border:0"></iframe>')


class _ShownFigure:
    """What :func:`show_figure` returns: the figure is on the page already, so showing this
    (a cell's last expression, ``display(...)``) adds nothing."""

    def _ipython_display_(self) -> None:
        pass

    def __repr__(self) -> str:
        return "<figure shown above>"


def show_figure(figure) -> _ShownFigure:
    """Show a figure inline as SVG where it is called (inside an ``if``, a loop or a function
    too, not only as a cell's last expression): a file the report or a study module wrote
    (the ``.svg`` beside a ``.png``) or a matplotlib figure (closed once drawn). Sharp at any
    zoom, and its text stays in the page, where the page check reads it (an SVG output would
    be exported as an image). What it returns shows nothing, so the figure appears once."""
    # deferred: see the note under __all__
    from IPython.display import HTML, display

    if hasattr(figure, "savefig"):
        text = svg_text(figure)
    else:
        text = Path(figure).with_suffix(".svg").read_text(encoding="utf-8")
    display(HTML(text[text.index("<svg"):]))
    return _ShownFigure()


def explore_run(campaign_dir: str | os.PathLike, out_dir: str | os.PathLike,
                variant: str | None = None, workload: str | None = None,
                iteration: int | None = None, height: int = 900, perfetto: bool = True,
                findings: bool | list[str] = True):
    """The trace explorer (:mod:`lisa_ext.report.explore`) of a campaign's first
    traced run matching the filters, written to ``out_dir/explorer_<run>.html``
    and shown in the notebook, under a link to the same run as a Perfetto trace
    (``out_dir/<run>.pftrace``, :func:`lisa_ext.report.perfetto.perfetto_link`)
    unless ``perfetto`` is false; ``findings``: the analyses whose findings it marks
    (``idle_miss``, ``iowait_boost``, ``wq_placement``; default all). For live
    re-aggregation on zoom, display ``explore(run_dir)`` itself after
    ``hv.extension("bokeh")``."""
    _campaign, found = traced_runs(repo_path(campaign_dir), variant, workload, iteration)
    run = found[0]
    out = repo_path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = explorer_page(run.trace, out / f"explorer_{figure_name(run.label)}.html",
                         f"{run.label} trace explorer", analyses=findings)
    shown = show_page(page, height)
    if not perfetto:
        return shown
    # deferred: see the note under __all__
    from IPython.display import HTML

    link = perfetto_link(run.path, out, figure_name(run.label))
    return HTML(link + shown.data)


def _local_kernel_manager(stderr_log: Path) -> type:
    """A kernel manager talking to its kernel over unix sockets: the kernel runs beside us, and
    over TCP (jupyter_client's default) ipykernel warns on every run that it is unencrypted. The
    kernel's own stderr goes to ``stderr_log``: ipykernel logs there (e.g. "KeyboardInterrupt caught
    in kernel" when it is interrupted while shutting down), and a failed study's terminal shows one
    line, the cell's error."""
    # deferred: see the note under __all__
    from jupyter_client.manager import AsyncKernelManager

    class LocalKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport = "ipc"

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with open(stderr_log, "ab") as log:  # the kernel keeps its own copy of the descriptor
                if not log.tell():
                    log.write(KERNEL_LOG_HEADER.encode())
                    log.flush()
                return await super()._async_launch_kernel(kernel_cmd, **{**kw, "stderr": log})

    return LocalKernelManager


#: the first line of a page's kernel log: what tells it from a user's file of that name
KERNEL_LOG_HEADER = "# lisa-ext: what the study notebook's kernel wrote to its stderr\n"


def check_page_outputs(out_html: Path) -> None:
    """Refuse a page (and its executed notebook beside it) over anything but an earlier one:
    an HTML page nbconvert wrote, a notebook papermill executed (never a study's own)."""
    for path, sign in ((out_html, 'class="jp-Notebook'), (out_html.with_suffix(".ipynb"), '"papermill": {'),
                       (out_html.with_suffix(".kernel.log"), KERNEL_LOG_HEADER.strip())):
        if os.path.exists(path) and (path.is_dir() or sign not in path.read_text(encoding="utf-8", errors="replace")):
            raise UserError(f"{path}: exists and is not a page or notebook lisa-ext wrote; "
                            "it is not overwritten: choose another -o")


def execute_notebook(notebook: Path, out_html: Path, parameters: dict[str, Any], *,
                     show_code: bool = False) -> Path:
    """Execute ``notebook`` with papermill (cwd = the output directory), export it as offline HTML
    (its code cells' source only with ``show_code``: :func:`export_notebook`)."""
    check_page_outputs(out_html)
    skip_iri_format_checker()
    # deferred: see the note under __all__
    import nbformat
    import papermill

    out_html.parent.mkdir(parents=True, exist_ok=True)
    executed = out_html.with_suffix(".ipynb")
    kernel_log = out_html.with_suffix(".kernel.log")
    kernel_log.unlink(missing_ok=True)  # this page's own log from an earlier run (check_page_outputs)
    try:
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters,
                                   kernel_name="python3", cwd=str(output_dir()),
                                   progress_bar=False, log_output=False,
                                   kernel_manager_class=_local_kernel_manager(kernel_log))
    except papermill.PapermillExecutionError as exc:
        number = _notebook_cell_number(nbformat.read(executed, as_version=4), exc.cell_index)
        error = " ".join(f"{exc.ename}: {exc.evalue}".split())
        raise NotebookFailed(notebook, f"cell {number}", f"{error[:500]}; the notebook as far as it ran: "
                                                         f"{executed}") from None
    finally:
        if kernel_log.exists() and kernel_log.stat().st_size <= len(KERNEL_LOG_HEADER.encode()):
            kernel_log.unlink()
    return export_notebook(nbformat.read(executed, as_version=4), out_html, show_code=show_code)


class NotebookFailed(SpecError):
    """A cell of a study's notebook raised: one line naming the notebook, the cell and the error,
    and where the notebook as far as it ran is kept. Exit status 1, not 2: what the command was
    given was fine (the campaign and its report are written and kept), the study's notebook failed."""

    exit_status = 1


def _notebook_cell_number(executed, index: int) -> int:
    """The number, from 1, in the study's own notebook of cell ``index`` of the notebook papermill
    executed (which holds one more cell, the parameters it injected)."""
    injected = sum("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in executed.cells[:index])
    return index - injected + 1


#: outputs only a live JupyterLab can use: HoloViews / panel loaders and comms
_LIVE_ONLY_MIME = {"application/vnd.holoviews_load.v0+json",
                   "application/vnd.holoviews_exec.v0+json"}


#: JupyterLab breaks an output's text anywhere (``word-break: break-all``): a variant's name in a
#: text table split mid-word. Lines wrap at spaces; only a word longer than the line still breaks.
_PAGE_CSS = "<style>.jp-OutputArea-output pre{word-break:normal}</style>"
#: the tag of a cell whose output is a figure; the page check fails such a cell that rendered nothing
FIGURE_TAG = "figure"
_FIGURE_CALL = re.compile(r"\bshow_figure\s*\(")


def export_notebook(nb, out_html: Path, *, show_code: bool = False) -> Path:
    """An executed notebook (``nbformat`` node) as one offline HTML page: its narrative, tables and
    figures; the code cells' source too only with ``show_code`` (a reader of a study's page reads
    results; the code is in the notebook beside the spec)."""
    skip_iri_format_checker()
    # deferred: see the note under __all__
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    exporter.log.setLevel(logging.ERROR)  # e.g. "alternative text is missing" per figure
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.exclude_input = not show_code
    nb = copy.deepcopy(nb)
    if any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        # papermill keeps the notebook's defaults above the values it ran with: show what ran
        nb.cells = [c for c in nb.cells if "parameters" not in c.get("metadata", {}).get("tags", [])]
    for cell in nb.cells:
        # HoloViews/panel's notebook loader and comm code (LISA's import shows them)
        # fetch BokehJS from a CDN and need a live kernel; the page's plots are
        # self-contained iframes and must work offline
        cell["outputs"] = [o for o in cell.get("outputs", [])
                           if not _LIVE_ONLY_MIME.intersection(o.get("data", {}))]
        if not show_code and cell.get("cell_type") == "code" and _FIGURE_CALL.search(cell.get("source", "")):
            # the page check finds a show_figure call in the source; hidden, the cell says it by its tag
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if FIGURE_TAG not in tags:
                tags.append(FIGURE_TAG)
    body, _resources = exporter.from_notebook_node(nb)
    # the page must work offline: drop the CDN scripts (require.js, MathJax) it does not use
    body = re.sub(r'<script[^>]*src="https://cdn[^"]*"[^>]*>\s*</script>', "", body)
    head_end = body.find("</head>")
    body = body[:head_end] + _PAGE_CSS + body[head_end:] if head_end >= 0 else _PAGE_CSS + body
    tmp = out_html.with_name(out_html.name + ".part")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, out_html)
    return out_html


def run_study(study: Study, campaign_dir: Path, out_html: Path, *, run: bool = True,
              progress: bool = True, smoke: bool = False,
              target: str | os.PathLike | None = None, board_timing: str | None = None,
              board_clock: str | None = None, show_code: bool = False, echo=print) -> Path:
    """Run (or resume) the study's campaign, write its report into ``campaign_dir/report``,
    execute its notebook (which reads the report) into ``out_html`` (with its code: ``show_code``)."""
    check_page_outputs(out_html)  # before the campaign runs
    if not run and not CampaignStore(campaign_dir).has_runs():
        _name_the_other_size(study, Path(campaign_dir), smoke)
    summary = ensure_campaign(study.spec, campaign_dir, run=run, progress=progress, smoke=smoke, target=target,
                              board_timing=board_timing, board_clock=board_clock)
    if summary is not None:
        echo(summary.line())
    # the study's own report: settings, also when --no-run renders runs made before they changed
    report = write_report(campaign_dir, html=False, **load_spec(study.spec, check_files=False).report)
    echo(f"{study.name} report: {report}")
    return execute_notebook(study.notebook, out_html,
                            {"campaign_dir": str(Path(campaign_dir).resolve()),
                             "report_dir": str(report.resolve()), "smoke": smoke}, show_code=show_code)


def _name_the_other_size(study: Study, campaign_dir: Path, smoke: bool) -> None:
    """``--no-run`` on a directory without runs, when the study's runs of the other size
    exist: say where they are and how to render them."""
    other = study.default_data(not smoke)
    if campaign_dir == study.default_data(smoke) and CampaignStore(other).has_runs():
        flag = "" if smoke else " --smoke"
        raise UserError(f"{campaign_dir}: no runs collected yet; {other} holds the study's "
                        f"{'full' if smoke else 'smoke'} runs: render them with "
                        f"lisa-ext study run {study.name}{flag} --no-run")


def _list(args: argparse.Namespace) -> int:
    for s in list_studies():
        spec = load_spec(s.spec, check_files=False)
        print(f"{s.name:18} {spec.description}")
    return 0


def _run(args: argparse.Namespace) -> int:
    study = find_study(args.name)
    # relative to where the user is, unlike the notebooks' paths (see repo_path)
    data = Path(args.data).resolve() if args.data else study.default_data(args.smoke)
    name = f"{study.name}-smoke" if args.smoke else study.name
    out = Path(args.out).resolve() if args.out else output_dir() / "out" / f"{name}.html"
    if args.fresh:
        check_page_outputs(out)  # before the earlier runs go
        spec = load_spec(study.spec, smoke=args.smoke, target=args.target, board_timing=args.board_timing,
                         board_clock=args.board_clock)
        # run_campaign removes only a campaign directory lisa-ext made; the page renders from the new runs
        print(run_campaign(spec, data, fresh=True, progress=not args.no_progress).line())
    try:
        html = run_study(study, data, out, run=not (args.no_run or args.fresh), progress=not args.no_progress,
                         smoke=args.smoke, target=args.target, board_timing=args.board_timing,
                         board_clock=args.board_clock, show_code=args.show_code)
    except SpecChanged as exc:  # the study's spec was edited after a run: say how to start over
        raise SpecChanged(f"{exc}, or start it over: lisa-ext study run {study.name}"
                          f"{' --smoke' if args.smoke else ''} --fresh (its runs are discarded)") from None
    print(f"{study.name} page: {html.resolve()}")
    return 0


def _new(args: argparse.Namespace) -> int:
    # deferred: only `study new` writes templates
    from lisa_ext.studies.template import write_study

    values = [v.strip() for v in (args.values or "").split(",") if v.strip()]
    written = write_study(args.name, knob=args.knob, values=values, kernel=args.kernel,
                          workloads=args.workload_kinds or ("schbench", "hackbench"), target=args.target)
    for path in written:
        print(f"wrote {path}")
    if not args.no_render:
        study = find_study(args.name)
        page = output_dir() / "out" / f"{study.name}.html"
        execute_notebook(study.notebook, page, {"campaign_dir": str(study.default_data()),
                                                "report_dir": str(page.with_name(f"{study.name}-report")),
                                                "smoke": False}, show_code=args.show_code)
        print(f"page, on the committed sample campaign until the study has runs: {page}")
    note = first_board_note(load_spec(find_study(args.name).spec))
    if note:
        print(note)
    print(f"next: lisa-ext campaign check notebooks/{args.name}.yml, then lisa-ext study run {args.name} --smoke "
          "(docs/your-own-study.md)")
    return 0


def first_board_note(spec) -> str | None:
    """What a study's target waits for before its first run: one line saying whether the virtual
    board's kernel and patched QEMU are in the cache, and what building them costs; None for a
    target that runs the kernel it has."""
    needs = first_boot_needs(spec.target_config)
    if needs is None:
        return None
    try:
        missing = first_boot_missing(needs)
    except UserError:
        missing = first_boot_missing(needs, kernel_built=False)
    if not missing:
        kernel = needs.kernel_variant.relative_to(workbench_path()) if needs.kernel_variant.is_relative_to(
            workbench_path()) else needs.kernel_variant
        return (f"the {needs.arch} board's kernel ({kernel}) and QEMU are built: `lisa-ext vboard up` boots it in "
                "seconds; a knob study runs on it as it is")
    up = "lisa-ext vboard up" + ("" if needs.arch == "x86_64" else f" --arch {needs.arch}")
    return (f"the {needs.arch} board: {' and '.join(missing)} not built in this cache yet; the first "
            f"`{up}` or `study run` builds {'them' if len(missing) > 1 else 'it'} once "
            f"(both: {needs.cost}): start `{up}` now in another terminal, and write the study meanwhile")


_SHOW_CODE_HELP = "show the notebook's code cells on the page (default: narrative, tables and figures only)"


def register(subparsers) -> None:
    p = subparsers.add_parser("study", help="run a study (campaign + report + notebook)",
                              description="List the studies in notebooks/, or run one: its campaign, "
                                          "its report and its notebook rendered to HTML.")
    sub = p.add_subparsers(dest="study_command", metavar="ACTION")
    sub.required = True
    sub.add_parser("list", help="the studies in notebooks/",
                   description="List the studies in notebooks/ with their descriptions.").set_defaults(func=_list)
    run = sub.add_parser("run", help="run a study's campaign, write its report, execute its notebook to HTML",
                         description="Run (or resume) a study's campaign into data/<name>/, write its "
                                     "report into data/<name>/report/, then execute its notebook "
                                     "into an HTML page.")
    run.add_argument("name", metavar="NAME", help="study name, e.g. wq-affinity (see: lisa-ext study list)")
    run.add_argument("--data", metavar="DIR", help="campaign directory (default: data/<name>)")
    run.add_argument("-o", "--out", metavar="HTML", help="output page (default: out/<name>.html)")
    collected = run.add_mutually_exclusive_group()
    collected.add_argument("--no-run", action="store_true",
                           help="do not run anything: render the notebook from the collected runs")
    collected.add_argument("--fresh", action="store_true",
                           help="discard the study's earlier runs (its campaign directory, when lisa-ext "
                                "made it) and run the campaign from the start")
    run.add_argument("--smoke", action="store_true",
                     help="the spec's smoke: size (shortest runs that fill every table cell), "
                          "into data/<name>-smoke and out/<name>-smoke.html")
    run.add_argument("--target", metavar="CONF",
                     help="LISA target config to run on instead of the spec's (another platform)")
    run.add_argument("--board-timing", choices=TIMINGS, metavar="{faithful,decisions}",
                     help=f"the virtual board's timing, instead of the spec's ({TIMINGS_HELP})")
    run.add_argument("--board-clock", choices=CLOCKS, metavar="{host,virtual}",
                     help=f"the virtual board's clock, instead of the spec's ({CLOCKS_HELP})")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--show-code", action="store_true", help=_SHOW_CODE_HELP)
    run.set_defaults(func=_run)
    new = sub.add_parser("new", help="start a study: spec, kernel variants or knob values, notebook",
                         description="Write notebooks/NAME.yml (campaign spec), notebooks/NAME.ipynb (its page: "
                                     "status, cover-letter table, mechanism figure, explorer) and, with "
                                     "--kernel, kernels/NAME/{baseline,patched}.yml; then render the page on "
                                     "the committed sample campaign, before any run. Nothing is overwritten.")
    new.add_argument("name", metavar="NAME", help="study name: lower-case letters, digits, dashes")
    new.add_argument("--knob", metavar="PATH", help="a runtime knob the variants set, e.g. "
                                                    "/sys/kernel/debug/sched/features")
    new.add_argument("--values", metavar="A,B,...", help="the knob's value per variant, the baseline first")
    new.add_argument("--kernel", action="store_true",
                     help="variants are kernels: write kernels/NAME/baseline.yml and patched.yml")
    new.add_argument("--workload-kind", action="append", metavar="KIND", dest="workload_kinds",
                     help="workload kind to start from: schbench, hackbench, rtapp, fio (repeatable; "
                          "default schbench and hackbench)")
    new.add_argument("--target", metavar="CONF", default="../target-configs/vboard.yml",
                     help="target config, relative to notebooks/ (default: the virtual board)")
    new.add_argument("--no-render", action="store_true", help="do not render the page on the sample")
    new.add_argument("--show-code", action="store_true", help=_SHOW_CODE_HELP)
    new.set_defaults(func=_new)
