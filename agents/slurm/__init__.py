"""The allocator driving a real Slurm cluster: read the queue, plan the day, commit the hour (docs/slurm.md).

- :mod:`agents.slurm.config`: the configuration file (ownership, workload mapping, real-time apps, slot length);
- :mod:`agents.slurm.jsonread`: Slurm's JSON of every supported version, read into version-free records;
- :mod:`agents.slurm.client`: Slurm's tools, with timeouts and retries (the only place that runs them);
- :mod:`agents.slurm.snapshot`: the cluster now as a scenario whose slot 0 is now;
- :mod:`agents.slurm.commit`: the plan's slot 0 as changes to Slurm, and the decisions printed;
- :mod:`agents.slurm.loop`: one cycle and the loop that repeats it;
- :mod:`agents.slurm.capacity`: the apps told their capacity (a file, a command) for their replicas;
- :mod:`agents.slurm.slurm_commands`: ``gpualloc slurm snapshot | cycle | run``.

The throw-away Slurm cluster of the tests and benchmarks is the laboratory's (:mod:`lab.local_slurm`).
"""
