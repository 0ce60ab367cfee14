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

With ``accounting=True`` the cluster also keeps Slurm's job accounting, read with ``sacct``: a MariaDB
server (its data folder, socket and a TCP port on 127.0.0.1 under ``root``) and slurmdbd start before
slurmctld, the cluster is added to the database with ``sacctmgr``, and slurm.conf stores jobs there with
their GPUs (``AccountingStorageTRES=gres/gpu``) and comments (``AccountingStoreFlags=job_comment``). Needs
also ``slurmdbd mariadb-server slurm-wlm-mysql-plugin`` (:data:`ACCOUNTING_TOOLS`); a job's record lands in
the database 1-3 s after it ends.
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
ACCOUNTING_HINT = (
    "as root: apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
    "slurmdbd mariadb-server slurm-wlm-mysql-plugin"
)
ACCOUNTING_TOOLS = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacct", "sacctmgr")
DB_PASSWORD = "gpualloc-test"  # the slurm user of the throw-away database, reachable only on 127.0.0.1
COMMAND_TIMEOUT = 60.0  # seconds: every call of a Slurm tool here is a hang guard, never a speed assertion
START_DEADLINE = 120.0  # seconds to wait for idle nodes (about 1 s when it works)


_STOPPED_LAST = ("slurmdbd", "mariadbd", "munged")  # stopped by a signal, in this order, after Slurm's shutdown


class ClusterStartError(RuntimeError):
    """The local cluster did not come up; the message carries the tail of its logs."""


def missing_tools(*, accounting: bool = False) -> list[str]:
    """Tools of :data:`TOOLS` not on PATH (also /usr/sbin), plus ``root`` when not running as root.

    Args:
        accounting: Also the tools of :data:`ACCOUNTING_TOOLS` (and slurmdbd's MySQL plugin).
    """
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    tools = TOOLS + ACCOUNTING_TOOLS if accounting else TOOLS
    missing = [tool for tool in tools if shutil.which(tool, path=path) is None]
    if accounting and not any(Path(d).glob("**/accounting_storage_mysql.so") for d in _PLUGIN_DIRS if Path(d).is_dir()):
        missing.append("slurm-wlm-mysql-plugin")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib/slurm-wlm")


def _tool(name: str) -> str:
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    found = shutil.which(name, path=path)
    if found is None:
        hint = ACCOUNTING_HINT if name in ACCOUNTING_TOOLS else INSTALL_HINT
        raise ClusterStartError(f"{name} is not installed ({hint})")
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
        accounting: Keep job accounting in a MariaDB through slurmdbd (module docstring).
    """

    root: Path
    nodes: int = 4
    gpus_per_node: int = 8
    partitions: Sequence[str] = ("batch",)
    slurm_conf_extra: Sequence[str] = ()
    timeout: float = COMMAND_TIMEOUT
    accounting: bool = False
    _dbd_port: int = 0
    _db_port: int = 0
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
        base = _free_port_base(self.nodes + 2 if self.accounting else self.nodes)
        self._dbd_port, self._db_port = base + self.nodes + 1, base + self.nodes + 2
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
            *(
                [
                    "AccountingStorageType=accounting_storage/slurmdbd",
                    "AccountingStorageHost=localhost",
                    f"AccountingStoragePort={self._dbd_port}",
                    f"AccountingStoragePass={r}/munge/munge.socket.2",  # else the default munge socket: auth errors
                    "AccountingStorageTRES=gres/gpu",
                    "AccountingStoreFlags=job_comment",  # else sacct's comment is empty
                ]
                if self.accounting
                else ["AccountingStorageType=accounting_storage/none"]
            ),
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
        if self.accounting:
            self._start_accounting()
        self.start_controller(clean=True)
        for name in self.node_names:
            self._spawn(f"slurmd-{name}", [_tool("slurmd"), "-D", "-N", name, "-f", str(self.conf)])
        self.wait_idle()
        return self

    def _start_accounting(self) -> None:
        """MariaDB on 127.0.0.1 and its own socket, its ``slurm`` user, slurmdbd, and this cluster in its database."""
        r = self.root
        data, sock = r / "mysql", r / "run" / "mysqld.sock"
        if not (data / "mysql").is_dir():
            data.mkdir(parents=True, exist_ok=True)
            with open(r / "log" / "mariadb-install.log", "ab") as log:
                subprocess.run(
                    [_tool("mariadb-install-db"), "--no-defaults", "--user=root", f"--datadir={data}",
                     "--auth-root-authentication-method=socket", "--skip-test-db"],
                    check=True, stdout=log, stderr=subprocess.STDOUT, timeout=max(START_DEADLINE, self.timeout),
                )  # fmt: skip
        self._spawn(
            "mariadbd",
            [_tool("mariadbd"), "--no-defaults", "--user=root", f"--datadir={data}", f"--socket={sock}",
             f"--pid-file={r}/run/mysqld.pid", "--bind-address=127.0.0.1", f"--port={self._db_port}",
             "--skip-name-resolve", f"--log-error={r}/log/mariadb.log"],
        )  # fmt: skip
        self._wait_for(sock.exists, "MariaDB's socket")
        grant = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )
        self._wait_for(
            lambda: subprocess.run(
                [_tool("mariadb"), "--no-defaults", "-S", str(sock), "-u", "root", "-e", grant],
                capture_output=True, timeout=self.timeout,
            ).returncode == 0,
            "MariaDB's slurm user",
        )  # fmt: skip
        dbd = r / "etc" / "slurmdbd.conf"  # beside slurm.conf, where slurmdbd looks; mode 600 or it refuses
        dbd.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={r}/munge/munge.socket.2",
                    "DbdHost=localhost",
                    f"DbdPort={self._dbd_port}",
                    "SlurmUser=root",
                    f"LogFile={r}/log/slurmdbd.log",
                    f"PidFile={r}/run/slurmdbd.pid",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self._db_port}",
                    "StorageUser=slurm",
                    f"StoragePass={DB_PASSWORD}",
                    "StorageLoc=slurm_acct_db",
                ]
            )
            + "\n"
        )
        dbd.chmod(0o600)
        self._spawn("slurmdbd", [_tool("slurmdbd"), "-D"])
        self._wait_for(lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0, "slurmdbd")
        # the cluster must be in the database before slurmctld's first start, else slurmctld stops
        known = self.run("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster").stdout.split()
        if "gpualloc-test" not in known:
            self.run("sacctmgr", "-i", "add", "cluster", "gpualloc-test")

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
        for key in [k for k in self._procs if k not in _STOPPED_LAST]:
            self._reap(key)
        # Job steps are children of slurmstepd, itself a child of slurmd: none may outlive the cluster.
        self._kill_strays()
        for key in _STOPPED_LAST:  # slurmdbd after slurmctld (its last records), the database after slurmdbd
            proc = self._procs.get(key)
            if proc is not None and proc.poll() is None:
                proc.terminate()
            self._reap(key)

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
