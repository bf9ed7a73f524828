"""What a sweep did, read from its folder and from Slurm; nothing here writes into a run folder.

- :mod:`~grpokit.reports.summary`: a point's state word (status.json + Slurm) and its numbers.
- :mod:`~grpokit.reports.status_table`: ``grpokit status`` (one row a point).
- :mod:`~grpokit.reports.report_table`: ``grpokit report`` (metrics tables, CSV/Markdown).
- :mod:`~grpokit.reports.plots`: ``grpokit report``'s curves and heat maps.
- :mod:`~grpokit.reports.curve_bands`: which curves are drawn one by one, the band of the rest.
- :mod:`~grpokit.reports.figure_text`: titles fitted inside a figure, the rehearsal mark, empty panels.
"""
