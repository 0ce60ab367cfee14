"""The GPU-cluster allocation problem: scenarios, rules, plans, metrics, validator and generators."""

from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.objective import placement_value
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Placement, Plan
from gpu_env.rules import Rule
from gpu_env.scenario import App, Job, JobType, Scenario, ScenarioError, load_scenario, save_scenario
from gpu_env.validation import Violation, validate

__all__ = [
    "App",
    "Job",
    "JobType",
    "Metrics",
    "Occupancy",
    "Placement",
    "Plan",
    "Rule",
    "Scenario",
    "ScenarioError",
    "Violation",
    "compute_metrics",
    "load_scenario",
    "placement_value",
    "save_scenario",
    "validate",
]

# The Gymnasium environment, registered on import: gymnasium.make("GpuCluster-v0", scenario=...), and its
# batched form: gymnasium.make_vec("GpuCluster-v0", num_envs=N, vectorization_mode="vector_entry_point", ...).
# Without scenario=, a reset draws a day of one of the seven families (gpu_env.env.DEFAULT_SCENARIO).
import gymnasium as _gymnasium

from gpu_env.generators import FAMILIES as _FAMILIES

if "GpuCluster-v0" not in _gymnasium.registry:
    _gymnasium.register(
        id="GpuCluster-v0",
        entry_point="gpu_env.list_env:make_env",
        vector_entry_point="gpu_env.batch.vector_env:GpuClusterVectorEnv",
        kwargs={"scenario": tuple(_FAMILIES)},
    )
# One day played live, a slot a step (agents.live_gym.live_env; docs/environment.md, "The live day"): the rules
# and the objective are gpu_env's, the live loop and its base planner the allocator's; make_vec gives Gymnasium's
# own SyncVectorEnv (AsyncVectorEnv with workers=k) with sb3-contrib's action_masks() (agents.live_gym.live_vector_env).
if "GpuClusterLive-v0" not in _gymnasium.registry:
    _gymnasium.register(
        id="GpuClusterLive-v0",
        entry_point="agents.live_gym.live_env:GpuClusterLiveEnv",
        vector_entry_point="agents.live_gym.live_vector_env:make_live_vec",
    )
