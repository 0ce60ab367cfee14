"""Reports: the tables, statistics, Markdown and figures of ``evaluate.py`` and of the rolling-horizon comparison."""
