"""Everything that plans: FIFO, the heuristic, and (later) the exact and learned modes, plus the CLI."""

from agents.options import PlanOptions
from agents.registry import SCHEDULERS, available_schedulers, get_scheduler, run_scheduler

__all__ = ["SCHEDULERS", "PlanOptions", "available_schedulers", "get_scheduler", "run_scheduler"]
