"""The laboratory: what only the benchmarks, the training scripts and the tests use. Not in the wheel.

- :mod:`lab.training`: the learned fast mode's training (optima, scorer, phases, export) and the live chooser's;
- :mod:`lab.evaluation`: ``evaluate.py``'s steps (scenarios, schedulers, files, report);
- :mod:`lab.live_arms`, :mod:`lab.variants`, :mod:`lab.drawn_history`: the live benchmarks' arms, the live
  planner's ablation variants, and drawn histories;
- :mod:`lab.live_chooser` and ``lab/policies/live_chooser.*``: a learned chooser that is not offered as a scheduler;
- :mod:`lab.benchmarking`, :mod:`lab.equal_time`: the benchmarks' shared harness;
- :mod:`lab.slurm_replicas`, :mod:`lab.replica_day`: a stand-in serving autoscaler (the apps' replicas as Slurm
  jobs in their reservations) and the Slurm benchmark's day played with it;
- :mod:`lab.layout`: the package drawing of docs/layout.md.

Scripts and tests import ``lab``; ``agents`` and ``gpu_env`` never do (tests/test_import_graph.py).
"""
