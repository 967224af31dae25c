"""The arm64 studies' placement figure, drawn on the host from a frame of the shape
``df_class_share`` returns (its campaign needs the arm64 board: tests/test_studies_arm64.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from lisa_ext.report.figures import FigureSpec
from lisa_ext.studies.placement import CLASS_SHARE_COLUMNS, plot_class_share, save_class_share_figure


def _share() -> pd.DataFrame:
    rows = [(variant, task, cls, runtime, pct)
            for variant, little in (("eas-off", 55.0), ("eas-on", 82.0))
            for task in ("small-0", "big-0")
            for cls, runtime, pct in (("little", little / 100, little), ("big", 1 - little / 100, 100 - little))]
    return pd.DataFrame(rows, columns=list(CLASS_SHARE_COLUMNS))


def test_one_panel_per_variant_with_each_task_as_a_bar():
    layout = plot_class_share(_share())
    panels = list(layout)
    assert len(panels) == 2
    for panel in panels:
        assert sorted(set(panel.dframe()["variant"])) == ["big-0", "small-0"]


def test_the_figure_is_written_through_the_report_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    png = save_class_share_figure(_share(), tmp_path / "out")
    assert png == tmp_path / "out" / "class-share.png"
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_builder_given_by_name_is_refused_where_it_is_given():
    with pytest.raises(TypeError, match="figure 'class-share': builder must be a function"):
        FigureSpec("class-share", "lisa_ext.studies.placement:plot_class_share", ())
