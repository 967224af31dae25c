"""The five RFC studies, one module per study: our numbers in each RFC's table shapes.

Each module (``lisa_ext.studies.<study>``, the notebook's name with underscores) reads a
campaign directory collected by ``lisa-ext study run NAME`` and returns:

* ``rfc_tables(campaign_dir)``: ``{table id: DataFrame}``, our numbers in the shape of the RFC's
  tables (``notebooks/rfc-numbers/<study>.yml``): index = the RFC's row labels, columns = its
  column names, NaN where this platform cannot give a cell;
* the mechanism the RFC's effect comes from, as ``df_*`` frames and figures.

:mod:`lisa_ext.studies.rfc` puts such a table beside the RFC's published one. The notebooks in
``notebooks/`` call these functions and hold only narrative and parameters.
"""
