"""``evaluate.py``'s steps: the scenarios and schedulers, planning and validation, the files and the report."""
