"""Cover-letter tables and figures from a comparison (:mod:`lisa_ext.stats`).

:mod:`~lisa_ext.report.tables` renders mmtests / Markdown / LKP / ± / CSV text,
:mod:`~lisa_ext.report.figures` draws holoviews figures and exports them,
:mod:`~lisa_ext.report.campaign` gathers a campaign directory into a metrics
table and trace-analysis figures, :mod:`~lisa_ext.report.cli` is ``lisa-ext report``.
"""

__all__: list[str] = []
