"""trainscope.render: how a report looks, whatever it says (torch-free).

The document model and its Markdown, HTML and LaTeX writers (``document``,
``document_latex``, ``latex_layout``), the report :class:`~trainscope.render.table.Table`
and the number formats (``table``), figures (``plots``, ``study_plots``; matplotlib
imported inside the functions that draw), the terminal (``console``; rich likewise) and
where report files go (``outdir``). Nothing here knows a run's analyses or a study.
"""
