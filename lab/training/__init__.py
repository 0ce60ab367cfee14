"""The learned fast mode's training side: the proven optima, the queue scorer, its training and its export.

``train.py`` at the repository's top runs the phases in order (:mod:`lab.training.training`).
The planner (:mod:`agents.ppo`) imports none of this: it runs the exported ONNX file.
"""
