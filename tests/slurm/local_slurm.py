"""A real single-node Slurm on this host for tests: munged, slurmctld and slurmd from Debian's
slurm-wlm, each with its own socket, ports, state and spool folders under one temporary folder,
so it never touches a site's /etc/slurm or another cluster running here.

    with LocalSlurm(tmp_path) as slurm:
        status, job_id, job = slurm.sbatch_wait(["slurm/single-node.sbatch"], env={...}, cwd=repo)

The packages are installed outside the tests (`make slurm-deps`, .ci/run); `missing()` says
what is absent so a test can skip with the reason.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "scancel")
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE")
SBIN = ("/usr/sbin", "/usr/bin")
PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib64/slurm",
               "/usr/lib/slurm")


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:
        if os.access(Path(d) / name, os.X_OK):
            return str(Path(d) / name)
    return None


def missing() -> str | None:
    """Why a local Slurm cannot start here, or None when it can."""
    absent = [n for n in DAEMONS + CLIENTS if _which(n) is None]
    if absent:
        return (f"Slurm/munge not installed ({', '.join(absent)} missing): `make slurm-deps` "
                f"installs Debian's slurm-wlm and munge (root, apt)")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "a local slurmd must run as root (it starts jobs as their users)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    """Start munged, slurmctld and slurmd (in the foreground, as our children) under ``root``."""

    def __init__(self, root: Path, cpus: int = 64, mpi_default: str = "none",
                 without_plugins: tuple[str, ...] = ()):
        """``without_plugins``: plugin file prefixes (e.g. "mpi_pmix") this cluster lacks, as a
        Slurm built or packaged without them would."""
        self.root = Path(root)
        self.cpus = cpus
        self.mpi_default = mpi_default
        self.without_plugins = without_plugins
        self.node = socket.gethostname()
        self.procs: dict[str, subprocess.Popen] = {}

    # -- paths --
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, srun, scontrol) needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        r = self.root
        plugin_dir = self._plugin_dir()
        lines = [
            "ClusterName=cbtest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge' / 'munge.sock'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            # Debian's default: no PMI unless srun is told (--mpi or SLURM_MPI_TYPE)
            f"MpiDefault={self.mpi_default}",
            "ReturnToService=2",
            # the node may claim more CPUs than this host has, so templates asking for
            # --cpus-per-task=8 x 8 tasks still schedule on a small CI machine
            "SlurmdParameters=config_overrides",
            "MinJobAge=600",
            *([f"PluginDir={plugin_dir}"] if plugin_dir else []),
            "KillWait=5",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _plugin_dir(self) -> Path | None:
        if not self.without_plugins:
            return None
        src = next((p for p in PLUGIN_DIRS if Path(p).is_dir()), None)
        if src is None:
            raise RuntimeError(f"no Slurm plugin folder among {PLUGIN_DIRS}")
        dst = self.root / "plugins"
        dst.mkdir(exist_ok=True)
        for f in Path(src).iterdir():
            if not f.name.startswith(self.without_plugins):
                (dst / f.name).symlink_to(f)
        return dst

    # -- life cycle --
    def start(self, timeout_s: float = 60.0) -> LocalSlurm:
        self._write_config()
        r = self.root
        env = {**os.environ, **self.env}
        self._spawn("munged", [_which("munged"), "--foreground", "--force",
                               f"--socket={r / 'munge' / 'munge.sock'}",
                               f"--key-file={r / 'munge' / 'munge.key'}",
                               f"--pid-file={r / 'run' / 'munged.pid'}",
                               f"--log-file={r / 'log' / 'munged.log'}",
                               f"--seed-file={r / 'munge' / 'munged.seed'}"], env)
        self._wait_for(lambda: (r / "munge" / "munge.sock").exists(), 20, "munged socket")
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)], env)
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)], env)
        self._wait_for(self._node_ready, timeout_s, "the node to become idle")
        return self

    def _spawn(self, name: str, argv: list[str], env: dict) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def _node_ready(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
        out = self.client(["sinfo", "-h", "-N", "-o", "%t"], check=False)
        return out.returncode == 0 and out.stdout.strip() in ("idle", "idle*") and "*" not in out.stdout

    def _wait_for(self, ready, timeout_s: float, what: str) -> None:
        t_end = time.time() + timeout_s
        while time.time() < t_end:
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self, tail: int = 15) -> str:
        parts = []
        for p in sorted((self.root / "log").glob("*")):
            lines = p.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {p.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=5)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients --
    def client(self, argv: list[str], env: dict | None = None, cwd: Path | None = None,
               timeout_s: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        full_env = {**os.environ, **(env or {}), **self.env}
        out = subprocess.run([_which(argv[0]), *argv[1:]], capture_output=True, text=True, env=full_env,
                             cwd=cwd, timeout=timeout_s, check=False)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} -> {out.returncode}: {out.stderr}\n{self.logs()}")
        return out

    def sbatch_wait(self, argv: list[str], env: dict | None = None, cwd: Path | None = None,
                    timeout_s: float = 600) -> tuple[int, str, dict]:
        """Submit and wait for the job to end; (its exit status, job id, job record). Polls
        scontrol twice a second (`sbatch --wait` polls at growing intervals: a 5 s job took 42)."""
        out = self.client(["sbatch", "--parsable", *argv], env=env, cwd=cwd, check=False)
        job_id = out.stdout.strip().split(";")[0]
        if out.returncode != 0 or not job_id:
            return out.returncode or 1, "", {"sbatch_stderr": out.stderr}
        t_end = time.time() + timeout_s
        while time.time() < t_end:
            rec = self.job(job_id)
            if rec.get("JobState") in FINAL_STATES:
                code, _, signal_no = rec.get("ExitCode", "1:0").partition(":")
                status = (int(code) if code.isdigit() and code != "0" else
                          (128 + int(signal_no) if signal_no.isdigit() and signal_no != "0" else int(code or 1)))
                return status, job_id, rec
            time.sleep(0.5)
        self.client(["scancel", job_id], check=False)
        raise RuntimeError(f"job {job_id} still running after {timeout_s:.0f} s: {self.logs()}")

    def job(self, job_id: str) -> dict:
        """`scontrol show job` as a dict (JobState, ExitCode, ...)."""
        out = self.client(["scontrol", "show", "job", "-o", job_id], check=False)
        rec = {}
        for item in out.stdout.split():
            key, sep, value = item.partition("=")
            if sep:
                rec[key] = value
        return rec
