"""The network-namespace cluster (tests/cluster/netns-cluster.sh) from Python: bring it up, run
commands as its login host, impair or kill nodes, tear it down.

Used by the pytest fixture in tests/cluster/conftest.py and by tests/cluster/rehearse.py.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPT = HERE / "netns-cluster.sh"

EXIT_CANNOT = 3  # the script's "cannot here" status: not root, no ip/tc, no netem


class ClusterUnavailable(RuntimeError):
    """Namespaces (or an impairment) cannot be made on this machine; the message says why."""


def why_unavailable() -> str | None:
    """A reason this machine cannot host the cluster, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root (network namespaces, veths, a bridge)"
    for tool in ("/usr/sbin/ip", "/usr/sbin/tc"):
        if not (Path(tool).exists() or _which(Path(tool).name)):
            return f"needs iproute2's {Path(tool).name}"
    if not _which("unshare"):
        return "needs unshare (util-linux)"
    return None


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


@dataclass
class Cluster:
    """A cluster of ``size`` nodes named ``prefix``1..N on ``net``.0/24."""

    prefix: str = "cbt"
    net: str = "10.213.23"
    size: int = 4
    rate_mbit: int = 1000
    state: Path = field(default=None)  # type: ignore[assignment]
    _lock: object = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.state is None:
            self.state = Path(f"/tmp/commbench-cluster-{self.prefix}")

    @property
    def lock_path(self) -> Path:
        return Path(f"{self.state}.lock")

    def _take_lock(self) -> None:
        """Hold the cluster's names for this process: another run (a second pytest, a rehearsal
        with the same prefix) must not tear down a cluster that is in use, nor share it."""
        if self._lock is not None:
            return
        handle = open(self.lock_path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            handle.close()
            raise ClusterUnavailable(
                f"the cluster '{self.prefix}' ({self.net}.0/24) is in use by another run (pid {owner}); "
                f"pick other names (CB_CLUSTER_PREFIX, CB_CLUSTER_NET) or wait for it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @property
    def nodes(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.size + 1)]

    def address(self, node: str) -> str:
        return f"{self.net}.{10 + self.nodes.index(node) + 1}"

    def _env(self) -> dict[str, str]:
        path = os.environ.get("PATH", "")
        return {**os.environ, "CB_CLUSTER_PREFIX": self.prefix, "CB_CLUSTER_NET": self.net,
                "CB_CLUSTER_STATE": str(self.state), "PATH": f"{path}:/usr/sbin:/sbin"}

    def script(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        out = subprocess.run(["bash", str(SCRIPT), *args], env=self._env(), capture_output=True,
                             text=True, timeout=timeout, check=False)
        if out.returncode == EXIT_CANNOT:
            raise ClusterUnavailable(out.stderr.strip() or out.stdout.strip())
        if check and out.returncode != 0:
            raise RuntimeError(f"netns-cluster.sh {' '.join(args)} exited {out.returncode}: "
                               f"{out.stderr.strip()} {out.stdout.strip()}")
        return out

    def up(self) -> None:
        self._take_lock()  # raises ClusterUnavailable when another live run holds these names
        self.script("down", check=False)  # a run killed before its teardown left these names
        self.script("up", "-n", str(self.size), "--rate-mbit", str(self.rate_mbit))

    def down(self) -> None:
        """Tear down what this process brought up; a cluster another run holds is left alone."""
        try:
            self._take_lock()
        except ClusterUnavailable:
            return
        try:
            self.script("down", check=False)
        finally:
            self._release_lock()

    def slow(self, node: str, delay_us: int | None = None, rate_mbit: int | None = None) -> None:
        self.script("slow", node, *_impairment(delay_us, rate_mbit))

    def slow_link(self, a: str, b: str, delay_us: int | None = None, rate_mbit: int | None = None) -> None:
        self.script("slow-link", a, b, *_impairment(delay_us, rate_mbit))

    def heal(self, *nodes: str) -> None:
        self.script("heal", *nodes)

    def kill(self, node: str) -> None:
        self.script("kill", node)

    def login_env(self) -> dict[str, str]:
        """The environment the script's `env` prints (what `run` gives a command)."""
        env = {}
        for line in self.script("env").stdout.splitlines():
            if line.startswith("export "):
                for item in line[len("export "):].split():
                    key, _, value = item.partition("=")
                    env[key] = value
        return env

    def run(self, argv: list[str], timeout: float = 600, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        """Run argv as the cluster's login host (root namespace, cluster environment, node names
        resolvable); the repository's commbench is imported by every rank (PYTHONPATH)."""
        env = self._env()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env.pop("COMMBENCH_HOSTS", None)
        return subprocess.run(["bash", str(SCRIPT), "run", "--", *argv], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def popen(self, argv: list[str]) -> subprocess.Popen:
        env = self._env()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env.pop("COMMBENCH_HOSTS", None)
        return subprocess.Popen(["bash", str(SCRIPT), "run", "--", *argv], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)


def _impairment(delay_us: int | None, rate_mbit: int | None) -> list[str]:
    args = []
    if delay_us is not None:
        args += ["--delay-us", str(delay_us)]
    if rate_mbit is not None:
        args += ["--rate-mbit", str(rate_mbit)]
    return args


def commbench(*args: str) -> list[str]:
    """argv that runs this checkout's commbench with the test's Python."""
    return [sys.executable, "-m", "commbench", *args]
