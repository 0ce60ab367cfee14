"""One day played live as a Gymnasium environment, a slot a step (``GpuClusterLive-v0``; docs/environment.md).

- :mod:`agents.live_gym.live_env`: the environment (:class:`~agents.live_gym.live_env.GpuClusterLiveEnv`);
- :mod:`agents.live_gym.live_vector_env`: its vector form for ``gymnasium.make_vec``;
- :mod:`agents.live_gym.live_policy`: the actions' candidate decisions around the live planner's base decision.

The rules and the objective are :mod:`gpu_env`'s; the live loop and its base planner are :mod:`agents.live`'s and
:mod:`agents.simulator`'s, so the environment lives on the planners' side (``gpu_env`` imports nothing of
``agents``; it registers the environment by name).
"""
