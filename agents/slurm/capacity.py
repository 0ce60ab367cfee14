"""Tell the apps' replicas their capacity: a file an autoscaler reads, a command it runs, or both.

Every committing cycle hands :func:`agents.slurm.commit.apply` a :class:`Teller`. The commit calls it twice: before
it waits for replicas to leave the reservations that a shrink deletes (each app's GPUs per node under the plan,
its reservations there and those to ``leave``), and once the reservations are made (the names to come back
into). What sites use to size serving replicas from such a number:

- **A file** (``replicas.capacity_file``), written whole to a temporary name and renamed, so that a reader never
  sees half of it: JSON (:func:`agents.slurm.commit.capacity`), or, for a name ending in ``.prom``, Prometheus'
  text format for node_exporter's textfile collector, one sample per app and node
  (``gpualloc_app_capacity_gpus{app="chat",node="gpu01"} 2``): a Prometheus-driven autoscaler (KEDA's
  ``prometheus`` scaler, a Kubernetes HPA through prometheus-adapter, or a site's own loop) reads it from there.
- **A command** (``replicas.scale_command``), run with the JSON on its standard input and ``replicas.scale_timeout``
  seconds to finish: a site's hook into its serving stack (``kubectl scale``, a Ray Serve or Slurm launcher).

A failing or hanging command, or a file that cannot be written, never stops a cycle: each is one line in the
cycle's summary (``"signal"``), and the drain then waits its bounded time as for replicas that do not leave.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.slurm.config import Replicas
from gpu_env.files import write_text_atomic


def prometheus_text(table: Mapping[str, Any]) -> str:
    """The capacity as Prometheus' text exposition format (node_exporter's textfile collector reads it)."""
    lines = [
        "# HELP gpualloc_app_capacity_gpus GPUs each app's replicas may use on each node, as planned by gpualloc.",
        "# TYPE gpualloc_app_capacity_gpus gauge",
    ]
    for app, nodes in sorted(table["apps"].items()):
        for node, entry in sorted(nodes.items()):
            lines.append(f'gpualloc_app_capacity_gpus{{app="{app}",node="{node}"}} {int(entry["gpus"])}')
        if not nodes:
            lines.append(f'gpualloc_app_capacity_gpus{{app="{app}",node=""}} 0')
    return "\n".join(lines) + "\n"


class Teller:
    """Tells the apps their capacity through the configured file and command (:class:`~agents.slurm.config.Replicas`).

    Calling it with the capacity table returns its problems, one line each (empty when all went well).
    """

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas

    def __bool__(self) -> bool:
        return self.replicas.capacity_file is not None or self.replicas.scale_command is not None

    def __call__(self, table: Mapping[str, Any]) -> list[str]:
        """Write the file and run the command with ``table``; the problems, one line each."""
        problems: list[str] = []
        text = json.dumps(table, sort_keys=True)
        if self.replicas.capacity_file is not None:
            path = Path(self.replicas.capacity_file)
            try:
                write_text_atomic(path, prometheus_text(table) if path.suffix == ".prom" else text + "\n")
            except OSError as exc:
                problems.append(f"replicas.capacity_file {path}: not written: {exc}")
        if self.replicas.scale_command is not None:
            argv = list(self.replicas.scale_command)
            try:
                done = subprocess.run(
                    argv, input=text, capture_output=True, text=True, timeout=self.replicas.scale_timeout, check=False
                )
            except subprocess.TimeoutExpired:
                problems.append(f"replicas.scale_command {argv[0]}: no answer within {self.replicas.scale_timeout:g} s")
            except OSError as exc:
                problems.append(f"replicas.scale_command {argv[0]}: cannot run: {exc}")
            else:
                if done.returncode != 0:
                    said = (done.stderr or done.stdout).strip().splitlines()
                    problems.append(
                        f"replicas.scale_command {argv[0]}: exit {done.returncode}" + (f": {said[-1]}" if said else "")
                    )
        return problems
