"""EASY backfill as Slurm does it: the online baseline that the live benchmark compares against.

An event-driven simulation of an EASY-backfilling batch scheduler over the
horizon, slot by slot, that sees a job only from its release on:

1. **Real-time capacity at the peak.** Each app holds FIFO's peak reservation
   (:func:`gpu_env.objective.peak_reservation`, exactly as :mod:`agents.fifo`):
   a batch scheduler does not follow demand, it keeps the app's peak held.
   Inherited (running) jobs are placed as given (rule 5).
2. **Priority.** The queue at slot t holds the jobs released by t
   (``release <= t``) that have not started and are still possible, ordered by
   worth per GPU-slot (:attr:`gpu_env.scenario.Job.weight`: ``value / (k * d)``
   when a value is given, else the priority) descending, ties by release, then
   by position in the file.
3. **Time limits are durations.** A job started at t holds its block for
   ``[t, t + d)`` (EASY plans with the jobs' time limits; here they are exact).
4. **Each slot t = 0..T-1, in queue order:**

   a. A job whose start window is over (``t`` past ``T - 1`` or past
      ``deadline - d``) is dropped: it is never placed.
   b. Until the head is found, each job that fits at t (some allowed block free
      over ``[t, t + d)``, capacity in every slot of it inside the horizon:
      :meth:`gpu_env.occupancy.Occupancy.next_feasible_mask`) starts at t on the
      lowest such block.
   c. The first job that does not fit at t is the **head**. Its reservation is
      its earliest feasible start after t given everything placed so far (the
      lowest block there). A job with no feasible start left in its window is
      dropped instead (the grid only fills up, so it never gets one) and the
      next job is tried as the head.
   d. **Backfilling.** Every later job in the queue may start at t when it fits
      at t *and* the head can still start at its reserved slot afterwards
      (rules 1 and 7 over the head's span; since placing a job never makes an
      earlier start feasible, "not delayed" is exactly "still feasible at the
      reserved start"). It takes the lowest block at t that keeps the head's
      reservation: one that ends by the reserved start never conflicts; one
      that overlaps it in time must leave one of the head's free blocks
      untouched, and the capacity over the head's span must still cover it
      (checked after placing; the job is removed again when it does not).
   e. Only the head has a reservation, and it is made afresh every slot: a job
      released later with a higher worth may come before it at t + 1.

Jobs that never start in the horizon are left out of the plan. At every slot
the decision depends only on the jobs released by then, so the plan's starts at
slot 0 are exactly what EASY starts now: the rolling loop
(:mod:`agents.simulator.simulation`), which commits only slot 0 of each plan,
executes the same schedule. (In the loop's state every released job has
release 0, so equal worths fall to file order there; the generators list jobs
in release order, where both orders agree.)

:func:`simulate` returns the grid with each slot's reservation; ``backfill=False``
turns step (d) off (a strict priority queue), for comparison.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).scheduler
'backfill'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.options import PlanOptions
from gpu_env import rules
from gpu_env.objective import peak_reservation
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario


@dataclass(frozen=True)
class Reservation:
    """The head's reservation in one slot, made before that slot's backfilling.

    Attributes:
        slot: The slot t of the decision.
        job: The head, an index into ``scenario.jobs``.
        start: Its earliest feasible start after t, given the jobs placed so far.
        first_gpu: The lowest block it could take there.
    """

    slot: int
    job: int
    start: int
    first_gpu: int


@dataclass
class EasyRun:
    """One EASY simulation of a scenario.

    Attributes:
        grid: Every placement: inherited jobs at 0, the others at the slot they started.
        reservations: The head's reservation of each slot that had a head, in slot order.
        backfilled: Jobs started behind a head (step d), in the order they started.
        dropped: Jobs given up: start window over, or no feasible start left.
    """

    grid: Occupancy
    reservations: list[Reservation] = field(default_factory=list)
    backfilled: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The schedule an EASY-backfilling scheduler runs over the horizon (``options`` are unused)."""
    return Plan.from_occupancy(simulate(scenario).grid, "backfill")


def priority_order(scenario: Scenario) -> list[int]:
    """Indices of the jobs to queue (not inherited): worth per GPU-slot descending, then release, then file order."""
    jobs = scenario.jobs
    return sorted(
        (i for i, job in enumerate(jobs) if job.running_on is None),
        key=lambda i: (-jobs[i].weight, jobs[i].release, i),
    )


def simulate(scenario: Scenario, *, backfill: bool = True) -> EasyRun:
    """Run EASY over the horizon, slot by slot (the module docstring states the rules).

    Args:
        scenario: The scenario.
        backfill: Let later jobs start in front of the head (step d); False gives a
            strict priority queue that stops at the head.

    Returns:
        The grid, each slot's reservation, and the jobs backfilled and dropped.
    """
    T = scenario.slots
    jobs = scenario.jobs
    grid = Occupancy(scenario)
    for i, curve in enumerate(peak_reservation(scenario)):
        grid.set_curve(i, curve)
    grid.place_inherited()
    run = EasyRun(grid)
    last_start = {i: rules.start_window(jobs[i], T).stop - 1 for i in range(len(jobs))}
    pending = priority_order(scenario)  # not started, not dropped, in queue order
    room = grid.slack().tolist()
    for t in range(T):
        head: Reservation | None = None
        head_blocks = 0  # the head's free blocks at its reserved start, as a bitmask of first GPUs
        gone: set[int] = set()
        for j in pending:
            job = jobs[j]
            if job.release > t:
                continue  # not released yet: unknown to the scheduler
            if t > last_start[j]:
                gone.add(j)
                run.dropped.append(j)
                continue
            _, now = grid.next_feasible_mask(j, t, t + 1, room)
            if head is None:
                if now:
                    grid.place(j, t, _lowest(now))
                    room = grid.slack().tolist()
                    gone.add(j)
                    continue
                start, blocks = grid.next_feasible_mask(j, t + 1, T, room)
                if not blocks:
                    gone.add(j)
                    run.dropped.append(j)
                    continue
                head, head_blocks = Reservation(t, j, start, _lowest(blocks)), blocks
                run.reservations.append(head)
                if not backfill:
                    break
                continue
            if not now:
                continue
            overlaps = t + job.duration > head.start
            if overlaps:
                now = rules.starts_clear_of(now, head_blocks, jobs[head.job].gpus, job.gpus)
                if not now:
                    continue  # every block it could take meets each block the head could take
            grid.place(j, t, _lowest(now))
            room = grid.slack().tolist()
            if overlaps:
                _, blocks = grid.next_feasible_mask(head.job, head.start, head.start + 1, room)
                if not blocks:  # the capacity over the head's span no longer covers it, on any block
                    grid.remove(j)
                    room = grid.slack().tolist()
                    continue
                head_blocks = blocks
            gone.add(j)
            run.backfilled.append(j)
        pending = [j for j in pending if j not in gone]
    return run


def _lowest(mask: int) -> int:
    """The lowest set bit of a non-zero bitmask: the lowest first GPU."""
    return (mask & -mask).bit_length() - 1
