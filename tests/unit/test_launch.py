"""Launch environment and argv: kill switches locked, multicast off unless opted in, argv lists."""
from pathlib import Path

from commbench import safety
from commbench.launch import mpiexec, supervise
from commbench.safety import KILL_SWITCHES


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
    from commbench.launch import srun

    monkeypatch.setattr(mpiexec, "inside_slurm_allocation", lambda: True)
    monkeypatch.setattr(mpiexec.shutil, "which", lambda name: "/usr/bin/srun" if name == "srun" else None)
    monkeypatch.setenv("SLURM_MPI_TYPE", "pmix")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    srun.choose_mpi_plugin.cache_clear()
    try:
        argv = mpiexec.launcher_argv(16, 8, [])
    finally:
        srun.choose_mpi_plugin.cache_clear()
    assert argv[0] == "srun" and "--ntasks=16" in argv and "--ntasks-per-node=8" in argv
    # the user's plugin, and the allocation's CPUs per task (srun stopped inheriting it in 22.05)
    assert "--mpi=pmix" in argv and "--cpus-per-task=8" in argv


def test_an_allocation_whose_srun_cannot_start_this_mpi_uses_mpiexec(monkeypatch):
    from commbench.launch import srun

    monkeypatch.setattr(mpiexec, "inside_slurm_allocation", lambda: True)
    monkeypatch.setattr(mpiexec.shutil, "which", lambda name: "/usr/bin/srun" if name == "srun" else None)
    monkeypatch.setattr(srun, "choose_mpi_plugin", lambda: (None, "no plugin"))
    argv = mpiexec.launcher_argv(2, 2, [])
    assert argv[0].endswith(("mpiexec", "mpirun")) and "-n" in argv


def test_srun_plugin_list_and_the_pmi_each_mpi_speaks(monkeypatch):
    from types import SimpleNamespace

    from commbench.launch import srun

    new = "MPI plugin types are...\n\tpmix\n\tnone\n\tpmi2\nspecific pmix plugin versions available: pmix_v4\n"
    old = "srun: MPI types are...\nsrun: none\nsrun: pmi2\n"
    for text, want in ((new, ["pmix", "none", "pmi2", "pmix_v4"]), (old, ["none", "pmi2"])):
        monkeypatch.setattr(srun.subprocess, "run", lambda *a, _err=text, **k: SimpleNamespace(stdout="", stderr=_err))
        assert srun.srun_plugins() == want
    assert srun.pmi_preference("Open MPI v5.0.11, package: Open MPI") == ["pmix"]
    # Slurm's PMIx 4 server with Open MPI 5's own PMIx 5 client: no srun --mpi=pmix (steps crash now and then)
    client = "OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1, Stable ABI: 5.0, Provisional ABI: 5.0)"
    assert "Slurm serves PMIx 4" in srun.pmix_mismatch(["pmix", "pmix_v4"], client)
    assert srun.pmix_mismatch(["pmix", "pmix_v5"], client) == ""
    assert srun.pmix_mismatch(["pmix"], client) == ""   # Slurm names no version: the probe decides
    monkeypatch.delenv("SLURM_MPI_TYPE", raising=False)
    srun.choose_mpi_plugin.cache_clear()
    monkeypatch.setattr(srun.shutil, "which", lambda name: "/usr/bin/srun")
    monkeypatch.setattr(srun, "mpi_library", lambda: "Open MPI v5.0.11, package: Open MPI")
    monkeypatch.setattr(srun, "srun_plugins", lambda: ["pmix", "none", "pmi2", "pmix_v4"])
    monkeypatch.setattr(srun, "mpi_pmix_version", lambda: client)
    monkeypatch.setattr(srun, "probe", lambda plugin, tasks=2: (True, "a probe passes"))
    plugin, why = srun.choose_mpi_plugin()
    srun.choose_mpi_plugin.cache_clear()
    assert plugin is None and "Slurm serves PMIx 4" in why
    assert srun.pmi_preference("Open MPI v4.1.6, package: Debian") == ["pmix", "pmi2"]
    assert srun.pmi_preference("MPICH Version: 4.1") == ["pmix", "pmi2"]
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "")
    assert srun.cpus_per_task_args() == []


def test_slurm_task_counts(monkeypatch):
    from commbench import world

    for k in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID"):
        monkeypatch.delenv(k, raising=False)
    assert world.slurm_allocation_tasks() == (0, None)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "8(x2)")
    assert world.slurm_allocation_tasks() == (16, 8)
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "8,4")
    monkeypatch.setenv("SLURM_NTASKS", "12")
    assert world.slurm_allocation_tasks() == (12, None)
    assert world.slurm_step_tasks() == 0           # the batch script is not a step
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "8")
    assert world.slurm_step_tasks() == 8


def test_ranks_all_inside_an_allocation_is_its_tasks(monkeypatch, tmp_path):
    from commbench.suite import load_suite

    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nbenchmarks:\n  - {name: a, family: harness, ops: [barrier], ranks: all}\n")
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "8(x2)")
    case = load_suite(suite, gpu_count=8).cases[0]
    assert (case.ranks, case.ranks_per_node) == (16, 8)
    monkeypatch.delenv("SLURM_JOB_ID")
    case = load_suite(suite, gpu_count=8).cases[0]
    assert (case.ranks, case.ranks_per_node) == (8, 8)    # outside Slurm: this node's GPUs


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
    from commbench.safety import active_kill_switches, kill_switch_conflict

    site = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "true"}
    assert set(active_kill_switches(site)) == {"NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"}
    reason = kill_switch_conflict({"NCCL_NVLS_ENABLE": "1"}, site)
    assert reason and "NCCL_NVLS_ENABLE=0" in reason and "cannot be overridden" in reason
    assert kill_switch_conflict({"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "Ring"}, site) is None
    assert kill_switch_conflict({"NCCL_NVLS_ENABLE": "1"}, {}) is None
