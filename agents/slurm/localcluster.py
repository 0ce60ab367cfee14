"""A throw-away Slurm cluster on this machine, for tests and benchmarks.

:class:`LocalCluster` writes a munge key, a ``slurm.conf`` and a ``gres.conf``
into one folder, starts munged, slurmctld and one slurmd per node on 127.0.0.1
(fake GPUs: character devices made with ``mknod``, never opened), waits until
every node is idle, and stops everything it started: ``scontrol shutdown``,
then each recorded pid is waited for and killed if still there. Use it as a
context manager so that a failure inside still stops the cluster::

    with LocalCluster(tmp_path, nodes=4, gpus_per_node=8) as cluster:
        cluster.sbatch("--hold", "--gres=gpu:2", "--wrap", "sleep 600")

Needs root and Debian's ``slurmctld slurmd slurm-client munge`` (22.05 tested);
:func:`missing_tools` says what is absent.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = (
    "as root: apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
    "slurmctld slurmd slurm-client munge"
)
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
COMMAND_TIMEOUT = 60.0  # seconds: every call of a Slurm tool here is a hang guard, never a speed assertion
START_DEADLINE = 120.0  # seconds to wait for idle nodes (about 1 s when it works)


class ClusterStartError(RuntimeError):
    """The local cluster did not come up; the message carries the tail of its logs."""


def missing_tools() -> list[str]:
    """Tools of :data:`TOOLS` not on PATH (also /usr/sbin), plus ``root`` when not running as root."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    missing = [tool for tool in TOOLS if shutil.which(tool, path=path) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _tool(name: str) -> str:
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    found = shutil.which(name, path=path)
    if found is None:
        raise ClusterStartError(f"{name} is not installed ({INSTALL_HINT})")
    return found


def _free_port_base(count: int) -> int:
    """A base port with ``count + 1`` free TCP ports after it on 127.0.0.1.

    slurm.conf must name every daemon's port before it starts, so the ports cannot be left to the OS
    and read back: they are probed free here, and a port taken in between makes the start fail loudly.
    """
    import socket

    for base in range(17000 + (os.getpid() % 200) * 20, 30000, 20):
        sockets = []
        try:
            for port in range(base, base + count + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise ClusterStartError("no free ports for slurmctld and the slurmds")


@dataclass
class LocalCluster:
    """A Slurm cluster of ``nodes`` nodes with ``gpus_per_node`` fake GPUs each, all on 127.0.0.1.

    Attributes:
        root: Folder that holds everything (configuration, state, logs, sockets).
        nodes: Number of nodes, named ``gpu01``, ``gpu02``, ...
        gpus_per_node: Fake GPUs per node (``Gres=gpu:h100:N``).
        partitions: Extra partitions over all nodes besides the default ``gpu``.
        slurm_conf_extra: Lines appended to slurm.conf.
        timeout: Seconds every Slurm command and every wait for the daemons may take (a hang guard).
    """

    root: Path
    nodes: int = 4
    gpus_per_node: int = 8
    partitions: Sequence[str] = ("batch",)
    slurm_conf_extra: Sequence[str] = ()
    timeout: float = COMMAND_TIMEOUT
    pids: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # ------------------------------------------------------------------ layout

    @property
    def node_names(self) -> list[str]:
        """``gpu01`` .. ``gpuNN``."""
        return [f"gpu{i + 1:02d}" for i in range(self.nodes)]

    @property
    def conf(self) -> Path:
        """The slurm.conf."""
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment under which Slurm's tools talk to this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/sbin"
        return env

    def _write_config(self) -> None:
        r = self.root
        for sub in ("etc", "munge", "run", "log", "spool", "state", "dev", "out"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o755)
        key = r / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(
                [_tool("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True, timeout=self.timeout
            )
            key.chmod(0o400)
        for i in range(self.gpus_per_node):
            dev = r / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))
        base = _free_port_base(self.nodes)
        names = self.node_names
        last = f"{self.nodes:02d}"
        lines = [
            "ClusterName=gpualloc-test",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/munge/munge.socket.2",
            f"SlurmctldPort={base}",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"StateSaveLocation={r}/state",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1000",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "CommunicationParameters=NoInAddrAny",
            "MailProg=/bin/true",
            "GresTypes=gpu",
            "MinJobAge=600",
            *self.slurm_conf_extra,
        ]
        for i, name in enumerate(names):
            lines.append(
                f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={base + 1 + i} CPUs=32 Boards=1 "
                f"SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=256000 "
                f"Gres=gpu:h100:{self.gpus_per_node}"
            )
        nodes = f"gpu[01-{last}]" if self.nodes > 1 else "gpu01"
        lines.append(
            f"PartitionName=gpu Nodes={nodes} Default=YES DefaultTime=01:00:00 MaxTime=INFINITE DefCpuPerGPU=4 State=UP"
        )
        for p in self.partitions:
            lines.append(
                f"PartitionName={p} Nodes={nodes} DefaultTime=01:00:00 MaxTime=INFINITE DefCpuPerGPU=4 State=UP"
            )
        self.conf.write_text("\n".join(lines) + "\n")
        last_dev = self.gpus_per_node - 1
        (r / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={nodes} Name=gpu Type=h100 File={r}/dev/nvidia[0-{last_dev}]\n"
            if self.gpus_per_node > 1
            else f"AutoDetect=off\nNodeName={nodes} Name=gpu Type=h100 File={r}/dev/nvidia0\n"
        )

    # ------------------------------------------------------------------ processes

    def _spawn(self, key: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{key}.stdout", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        log.close()
        self._procs[key] = proc
        self.pids[key] = proc.pid

    def start(self) -> LocalCluster:
        """Write the configuration, start every daemon and wait until every node is idle."""
        self._write_config()
        r = self.root
        self._spawn(
            "munged",
            [
                _tool("munged"),
                "-f",
                "-F",
                f"--key-file={r}/munge/munge.key",
                f"--socket={r}/munge/munge.socket.2",
                f"--pid-file={r}/run/munged.pid",
                f"--log-file={r}/log/munged.log",
                f"--seed-file={r}/munge/munged.seed",
            ],
        )
        self._wait_for(lambda: (r / "munge" / "munge.socket.2").exists(), "munged's socket")
        self.start_controller(clean=True)
        for name in self.node_names:
            self._spawn(f"slurmd-{name}", [_tool("slurmd"), "-D", "-N", name, "-f", str(self.conf)])
        self.wait_idle()
        return self

    def start_controller(self, *, clean: bool = False) -> None:
        """Start slurmctld (``clean``: with ``-i``, ignoring saved state, the first start only)."""
        argv = [_tool("slurmctld"), "-D", "-f", str(self.conf)]
        if clean:
            argv.insert(2, "-i")
        self._spawn("slurmctld", argv)

    def stop_controller(self) -> None:
        """Stop slurmctld only (``scontrol shutdown slurmctld``); the slurmds and the jobs stay."""
        self.scontrol("shutdown", "slurmctld", check=False)
        self._reap("slurmctld")

    def restart_controller(self) -> None:
        """Stop slurmctld and start it again from its saved state; wait until it answers."""
        self.stop_controller()
        self.start_controller()
        self._wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0, "slurmctld after restart")

    def wait_idle(self) -> None:
        """Wait until every node is idle (a hang guard of :data:`START_DEADLINE` seconds)."""

        def idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", check=False)
            return out.returncode == 0 and len(set(out.stdout.split())) == self.nodes

        self._wait_for(idle, "idle nodes")

    def _wait_for(self, condition: object, what: str) -> None:
        deadline = time.monotonic() + max(START_DEADLINE, self.timeout)
        while time.monotonic() < deadline:
            if condition():  # type: ignore[operator]
                return
            for key, proc in self._procs.items():
                if proc.poll() is not None and key in ("munged", "slurmctld"):
                    raise ClusterStartError(f"{key} exited with {proc.returncode}: {self.log_tail(key)}")
            time.sleep(0.2)
        raise ClusterStartError(f"timed out waiting for {what}: {self.log_tail('slurmctld')}")

    def log_tail(self, key: str, lines: int = 15) -> str:
        """The last lines of a daemon's log, for error messages."""
        texts = []
        for path in (self.root / "log" / f"{key}.log", self.root / "log" / f"{key}.stdout"):
            if path.exists():
                texts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return " | ".join(texts)

    def _reap(self, key: str, grace: float = 20.0) -> None:
        """Wait ``grace`` seconds for a daemon to end after its shutdown, then kill its process group."""
        proc = self._procs.pop(key, None)
        self.pids.pop(key, None)
        if proc is None:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=self.timeout)

    def stop(self) -> None:
        """Cancel every job, shut Slurm down and stop munged; every pid started here is waited for or killed."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", "root", check=False)
            self.scontrol("shutdown", check=False)
        for key in [k for k in self._procs if k != "munged"]:
            self._reap(key)
        # Job steps are children of slurmstepd, itself a child of slurmd: none may outlive the cluster.
        self._kill_strays()
        if "munged" in self._procs:
            proc = self._procs["munged"]
            if proc.poll() is None:
                proc.terminate()
            self._reap("munged")

    def _kill_strays(self) -> None:
        """Kill slurmstepd processes whose configuration is this cluster's (found by the spool path in /proc)."""
        marker = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if b"slurmstepd" in cmdline and (marker in environ or marker in cmdline):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ commands

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm tool against this cluster (a timeout on every call)."""
        proc = subprocess.run([_tool(tool), *args], capture_output=True, text=True, env=self.env, timeout=self.timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``scontrol ARGS``."""
        return self.run("scontrol", *args, check=check)

    def sbatch(self, *args: str) -> str:
        """Submit a job; returns its id. Output goes under the cluster's folder."""
        out = self.run("sbatch", "--parsable", f"--output={self.root}/out/%j.out", *args)
        return out.stdout.strip().split(";")[0]
