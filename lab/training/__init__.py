"""Training the learned policies (the laboratory: not in the wheel).

The fast mode's queue scorer (``train.py``: the proven optima, :mod:`lab.training.scorer`, the phases of
:mod:`lab.training.training`, :mod:`lab.training.export`), the stepwise policy (``train_stepwise.py``,
:mod:`lab.training.stepwise_training`), the live chooser (``train_live.py``, :mod:`lab.training.chooser_training`),
their configs (:mod:`lab.training.train_config`) and the fresh draws the fast mode's benchmarks use. The planners
(:mod:`agents.ppo`, :mod:`agents.ppo_stepwise`) import none of this: they run the exported ONNX files.
"""
