"""Launch environment and argv: kill switches locked, multicast off unless opted in, argv lists."""
from pathlib import Path

from commbench.launch import mpiexec, safety, supervise
from commbench.launch.safety import KILL_SWITCHES


def test_kill_switch_cannot_be_overridden(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    env = safety.launch_env(Path("/tmp/r"), {"NCCL_NVLS_ENABLE": "1", "NCCL_ALGO": "NVLS"}, allow_multicast=True)
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["NCCL_ALGO"] == "NVLS"


def test_multicast_off_unless_a_case_opted_in(monkeypatch):
    for k in KILL_SWITCHES:
        monkeypatch.delenv(k, raising=False)
    env = safety.launch_env(Path("/tmp/r"), {"NCCL_NVLS_ENABLE": "1"}, allow_multicast=False)
    assert all(env[k] == v for k, v in KILL_SWITCHES.items())
    env = safety.launch_env(Path("/tmp/r"), {}, allow_multicast=True)
    assert "NCCL_NVLS_ENABLE" not in env


def test_ranks_know_the_run_folder():
    env = safety.launch_env(Path("/tmp/r"), {}, allow_multicast=False)
    assert env["COMMBENCH_LOG_DIR"] == "/tmp/r/logs"


def test_open_mpi_argv_is_a_list_with_forwarded_vars(monkeypatch):
    monkeypatch.setattr(mpiexec, "find_mpiexec", lambda: "/x/mpiexec")
    monkeypatch.setattr(mpiexec, "_is_open_mpi", lambda _m: True)
    monkeypatch.setattr(mpiexec, "inside_slurm_allocation", lambda: False)
    argv = mpiexec.launcher_argv(16, 8, ["NCCL_ALGO"])
    assert argv[:3] == ["/x/mpiexec", "-n", "16"]
    assert "--oversubscribe" in argv
    assert argv[argv.index("--map-by") + 1] == "ppr:8:node"
    assert argv[argv.index("-x") + 1] == "NCCL_ALGO"


def test_srun_inside_an_allocation(monkeypatch):
    monkeypatch.setattr(mpiexec, "inside_slurm_allocation", lambda: True)
    monkeypatch.setattr(mpiexec.shutil, "which", lambda name: "/usr/bin/srun" if name == "srun" else None)
    argv = mpiexec.launcher_argv(16, 8, [])
    assert argv[0] == "srun" and "--ntasks=16" in argv and "--ntasks-per-node=8" in argv


def test_stack_dump_never_signals_a_stale_or_foreign_pid(tmp_path):
    import os
    import subprocess
    import time

    (tmp_path / "logs").mkdir()
    victim = subprocess.Popen(["sleep", "30"])
    try:
        stale = tmp_path / "logs" / "launch-0.rank0.pid"
        stale.write_text(f"{supervise.socket.gethostname()} {victim.pid}")
        old = time.time() - 3600
        os.utime(stale, (old, old))  # left by an earlier run
        (tmp_path / "logs" / "launch-0.rank1.pid").write_text(f"some-other-host {victim.pid}")
        supervise._dump_stacks(tmp_path, 0, since=time.time() - 5)
        time.sleep(0.2)
        assert victim.poll() is None  # still alive: nothing was signalled
    finally:
        victim.kill()


def test_a_variant_that_changes_a_set_kill_switch_is_refused():
    from commbench.launch.safety import active_kill_switches, kill_switch_conflict

    site = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "true"}
    assert set(active_kill_switches(site)) == {"NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"}
    reason = kill_switch_conflict({"NCCL_NVLS_ENABLE": "1"}, site)
    assert reason and "NCCL_NVLS_ENABLE=0" in reason and "cannot be overridden" in reason
    assert kill_switch_conflict({"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "Ring"}, site) is None
    assert kill_switch_conflict({"NCCL_NVLS_ENABLE": "1"}, {}) is None
