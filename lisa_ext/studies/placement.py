"""Where a campaign's tasks ran on an asymmetric platform: the placement rows and figure of a study.

From every traced run, :meth:`~lisa_ext.analysis.capacity_placement.CapacityPlacementAnalysis.df_task_runtime`
(runtime per capacity class, from ``sched_switch`` and the run's ``platform.yml``), averaged per
variant and task over iterations. Runs on a symmetric platform (the x86 board, a host) have no
classes: :func:`df_class_share` is then empty and a page says so instead of drawing a figure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.report.figures import FigureSpec, render_figures, residency_figure
from lisa_ext.studies.runs import per_run_analysis
from lisa_ext.trace import PLATFORM_FILE

__all__ = ["CLASS_SHARE_COLUMNS", "df_class_share", "is_asymmetric", "plot_class_share", "save_class_share_figure"]

#: Columns of :func:`df_class_share`.
CLASS_SHARE_COLUMNS = ("variant", "task", "class", "runtime_s", "pct")


def is_asymmetric(campaign_dir: str | os.PathLike) -> bool:
    """Whether the campaign's runs recorded CPUs of more than one capacity (their platform.yml,
    LISA's PlatformInfo as ``to_yaml_map`` writes it)."""
    from ruamel.yaml import YAML

    for run in read_campaign(Path(campaign_dir)).ok_runs:
        path = run.path / PLATFORM_FILE
        if path.is_file():
            conf = ((YAML(typ="safe").load(path.read_text()) or {}).get("platform-info") or {}).get("conf") or {}
            capacities = (conf.get("cpu-capacities") or {}).get("orig") or {}
            return len(set(capacities.values())) > 1
    return False


def df_class_share(campaign_dir: str | os.PathLike, tasks: Sequence[str] = ()) -> pd.DataFrame:
    """Per variant and task, the runtime on each capacity class (s, mean over iterations) and its
    share of the task's runtime (%): :data:`CLASS_SHARE_COLUMNS`. ``tasks``: comm prefixes to keep
    (e.g. the rt-app task names; default every task). Empty on a symmetric platform."""
    if not is_asymmetric(campaign_dir):
        return pd.DataFrame(columns=list(CLASS_SHARE_COLUMNS))
    runs = per_run_analysis(campaign_dir, "capacity_placement", "df_task_runtime", by="class")
    if tasks:
        runs = runs[runs["comm"].str.startswith(tuple(tasks))]
    per_run = runs.groupby(["variant", "iteration", "comm", "group"], sort=False)["runtime_s"].sum().reset_index()
    iterations = per_run.groupby("variant")["iteration"].nunique()
    mean = per_run.groupby(["variant", "comm", "group"], sort=False)["runtime_s"].sum().reset_index()
    mean["runtime_s"] /= mean["variant"].map(iterations)
    mean["pct"] = 100 * mean["runtime_s"] / mean.groupby(["variant", "comm"])["runtime_s"].transform("sum")
    return mean.rename(columns={"comm": "task", "group": "class"})[list(CLASS_SHARE_COLUMNS)]


def plot_class_share(share: pd.DataFrame, title: str = "runtime per capacity class") -> Any:
    """One stacked-bar panel per variant: % of each task's runtime on each capacity class."""
    # residency_figure's bars are per "variant": here that key is the task, within one variant's panel
    panels = [residency_figure(g.drop(columns="variant").rename(columns={"class": "state", "task": "variant"})
                               [["variant", "state", "pct"]],
                               f"{title}: {variant}", "capacity class")
              for variant, g in share.groupby("variant", sort=False)]
    layout = panels[0]
    for panel in panels[1:]:
        layout = layout + panel
    return layout.cols(1) if len(panels) > 1 else layout


def save_class_share_figure(share: pd.DataFrame, out_dir: str | os.PathLike, name: str = "class-share") -> Path:
    """:func:`plot_class_share` as ``out_dir/<name>.png``, through the report's figure cache."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = FigureSpec(name, plot_class_share, (share.reset_index(drop=True),))
    return render_figures([spec], out, formats=("png",))[0]
