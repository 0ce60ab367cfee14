"""The learned fast mode's training side: config, network, imitation of greedy, PPO, evaluation, export.

``train.py`` at the repository's top runs these phases in order. The planner
(:mod:`agents.ppo`) imports none of this: it runs the exported ONNX file.
"""
