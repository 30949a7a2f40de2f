"""The NCCL profiler plugin on the CPU: it builds, its ABI matches NCCL's header, and driven
through NCCL's documented event order (tests/unit/native/profiler_harness.cc) it writes the
records commbench.profile.nccl_records turns into row columns."""
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from commbench.profile import nccl_records, plugin_build

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "unit" / "native" / "profiler_harness.cc"
_EXT_NAME = "nccl-2.28.9-ext-profiler.tar.gz"   # NCCL's own profiler headers (BSD), beside the checkout
NCCL_EXT = next((p for p in (ROOT / "shared" / "third_party" / _EXT_NAME,
                             ROOT.parent / "shared" / "third_party" / _EXT_NAME,
                             Path("/work/shared/third_party") / _EXT_NAME) if p.exists()),
                Path("/work/shared/third_party") / _EXT_NAME)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    cache = tmp_path_factory.mktemp("jit")
    mp = pytest.MonkeyPatch()
    mp.setenv("COMMBENCH_JIT_CACHE", str(cache))
    try:
        yield plugin_build.build()
    finally:
        mp.undo()


@needs_cxx
def test_plugin_builds_once_and_exports_the_v5_table(plugin, monkeypatch):
    assert plugin.name == "libnccl-profiler-commbench.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(plugin)], capture_output=True, text=True).stdout
    assert "ncclProfiler_v5" in syms and "commbench_profiler_mark" in syms
    # internal symbols stay hidden: nothing else can clash with NCCL or another plugin
    exported = [ln.split()[-1] for ln in syms.splitlines() if ln.strip()]
    assert set(exported) <= {"ncclProfiler_v5", "commbench_profiler_mark", "commbench_profiler_abi"}
    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(plugin.parent.parent))
    mtime = plugin.stat().st_mtime_ns
    assert plugin_build.build() == plugin and plugin.stat().st_mtime_ns == mtime  # cached


@needs_cxx
@pytest.mark.skipif(not NCCL_EXT.exists(), reason=f"{NCCL_EXT} (NCCL's own profiler headers) not here")
def test_our_abi_declarations_match_nccl_profiler_v5_h(tmp_path):
    """Field offsets and sizes of our declarations equal those of NCCL's profiler_v5.h."""
    with tarfile.open(NCCL_EXT) as tar:
        members = [m for m in tar.getmembers() if "/example/nccl/" in m.name and m.name.endswith(".h")]
        tar.extractall(tmp_path, members=members, filter="data")
    inc = next(tmp_path.rglob("profiler_v5.h")).parent
    pairs = {
        "type": "type", "parentObj": "parent", "rank": "rank",
        "groupApi.graphCaptured": "group_api.graph_captured", "groupApi.groupDepth": "group_api.depth",
        "collApi.func": "coll_api.func", "collApi.count": "coll_api.count", "collApi.datatype": "coll_api.dtype",
        "collApi.root": "coll_api.root", "collApi.stream": "coll_api.stream",
        "collApi.graphCaptured": "coll_api.graph_captured",
        "p2pApi.func": "p2p_api.func", "p2pApi.count": "p2p_api.count", "p2pApi.datatype": "p2p_api.dtype",
        "p2pApi.stream": "p2p_api.stream", "p2pApi.graphCaptured": "p2p_api.graph_captured",
        "kernelLaunch.stream": "kernel_launch.stream",
        "coll.seqNumber": "coll.seq", "coll.func": "coll.func", "coll.sendBuff": "coll.send_buf",
        "coll.recvBuff": "coll.recv_buf", "coll.count": "coll.count", "coll.root": "coll.root",
        "coll.datatype": "coll.dtype", "coll.nChannels": "coll.n_channels", "coll.nWarps": "coll.n_warps",
        "coll.algo": "coll.algo", "coll.proto": "coll.proto", "coll.parentGroup": "coll.v4_group",
        "p2p.func": "p2p.func", "p2p.buff": "p2p.buf", "p2p.datatype": "p2p.dtype", "p2p.count": "p2p.count",
        "p2p.peer": "p2p.peer", "p2p.nChannels": "p2p.n_channels", "p2p.parentGroup": "p2p.v4_group",
        "proxyOp.pid": "proxy_op.pid", "proxyOp.channelId": "proxy_op.channel", "proxyOp.peer": "proxy_op.peer",
        "proxyOp.nSteps": "proxy_op.n_steps", "proxyOp.chunkSize": "proxy_op.chunk_bytes",
        "proxyOp.isSend": "proxy_op.is_send", "proxyStep.step": "proxy_step.step",
        "kernelCh.channelId": "kernel_ch.channel", "kernelCh.pTimer": "kernel_ch.gpu_start_ns",
        "netPlugin.id": "net.id", "netPlugin.data": "net.data",
    }
    args = {"proxyStep.transSize": "proxy_step.bytes", "proxyCtrl.appendedProxyOps": "proxy_ctrl.appended",
            "netPlugin.data": "net.data", "kernelCh.pTimer": "kernel_ch.gpu_stop_ns"}
    table = {"name": "name", "init": "init", "startEvent": "start_event", "stopEvent": "stop_event",
             "recordEventState": "record_state", "finalize": "finalize"}
    lines = ['#include <stddef.h>', '#include <sys/types.h>', '#include "err.h"', '#include "profiler.h"',
             '#include "profiler_abi.h"',
             "#define SAME(A, FA, B, FB) static_assert(offsetof(A, FA) == offsetof(B, FB) && "
             "sizeof(((A*)0)->FA) == sizeof(((B*)0)->FB), #FA)"]
    lines += [f"SAME(ncclProfilerEventDescr_v5_t, {a}, cbp_descr, {b});" for a, b in pairs.items()]
    lines += [f"SAME(ncclProfilerEventStateArgs_v5_t, {a}, cbp_state_args, {b});" for a, b in args.items()]
    lines += [f"SAME(ncclProfiler_v5_t, {a}, cbp_plugin_v5, {b});" for a, b in table.items()]
    lines += ["static_assert(sizeof(ncclProfilerEventDescr_v5_t) == sizeof(cbp_descr), \"descr\");",
              "static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == sizeof(cbp_state_args), \"args\");",
              "static_assert(sizeof(ncclProfiler_v5_t) == sizeof(cbp_plugin_v5), \"table\");",
              "static_assert(ncclProfileKernelCh == CBP_EV_KERNEL_CH && ncclProfileCollApi == CBP_EV_COLL_API"
              " && ncclProfileProxyStep == CBP_EV_PROXY_STEP && ncclProfileGroupApi == CBP_EV_GROUP_API, \"bits\");",
              "static_assert(ncclProfilerKernelChStop == CBP_STATE_KERNEL_CH_STOP && ncclProfilerProxyStepSendWait"
              " == CBP_STATE_STEP_SEND_WAIT && ncclProfilerProxyStepRecvFlushWait == CBP_STATE_STEP_RECV_FLUSH_WAIT"
              " && ncclProfilerProxyOpInProgress_v4 == CBP_STATE_PROXY_OP_IN_PROGRESS, \"states\");",
              "int main() { return 0; }"]
    src = tmp_path / "abi_check.cc"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{inc}", f"-I{plugin_build.source_dir()}",
                           str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def harness_records(plugin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    exe = tmp / "harness"
    subprocess.run(["g++", "-std=c++17", f"-I{plugin_build.source_dir()}", str(HARNESS), "-o", str(exe),
                    "-ldl", "-lpthread"], check=True)
    out_dir = tmp / "nccl"
    out_dir.mkdir()
    proc = subprocess.run([str(exe), str(plugin)], capture_output=True, text=True, timeout=60,
                          env={"COMMBENCH_NCCL_PROFILE_DIR": str(out_dir), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    files = list(out_dir.glob("nccl-*-pid*-comm0000000000c0ffee-rank1.jsonl"))
    assert len(files) == 1, list(out_dir.iterdir())
    return proc.stdout, nccl_records.read_lines(files[0])


@needs_cxx
def test_harness_sees_plugin_name_and_mask(harness_records):
    stdout, lines = harness_records
    assert "name=commbench" in stdout and "comms=1" in stdout
    init = lines[0]
    assert init["kind"] == "init" and init["abi"] == 5 and init["nranks"] == 4 and init["rank"] == 1
    # tasks, kernel channels, proxy ops and steps, and the API events are asked for
    for bit in (2, 4, 8, 16, 64, 256, 512, 1024):
        assert init["mask"] & bit
    assert lines[-1]["kind"] == "finalize" and lines[-1]["late_events"] == 1 and lines[-1]["partial"] == 1


@needs_cxx
def test_harness_collective_record(harness_records):
    _, lines = harness_records
    tasks = nccl_records.tasks_of(nccl_records.between_marks(lines, "begin warmup", "end warmup"))
    assert [t.func for t in tasks] == ["AllReduce", "AllGather", "Send", "Recv", "AllReduce"]
    ar = tasks[0]
    assert (ar.seq, ar.algo, ar.proto, ar.nchannels, ar.bytes, ar.complete) == (7, "Ring", "Simple", 2,
                                                                                  1 << 20, True)
    assert ar.kernel_ns == 250_000  # first channel start to last channel stop, GPU timer
    assert sorted(c[0] for c in ar.channels) == [0, 1]
    assert ar.proxy_total == 2 and ar.proxy_steps == 8
    assert sorted(p["bytes"] for p in ar.proxies) == [4 * 65536, 4 * 65536]
    assert {p["send"] for p in ar.proxies} == {0, 1}
    assert ar.api_ns[0] <= ar.enq_ns[0] <= ar.enq_ns[1] <= ar.api_ns[1]  # enqueue happens inside the call
    # a kernel finishing before NCCL reports the enqueue still completes the task
    assert tasks[1].complete and tasks[1].kernel_ns == 100_000 and tasks[1].proto == "LL128"
    assert (tasks[2].kind, tasks[2].rank, tasks[2].bytes) == ("p2p", 1, 4096)
    # the channel that never reported its end leaves the task incomplete, not lost
    stuck = tasks[4]
    assert not stuck.complete and stuck.kernel_ns == 50_000
    pxn = [d for d in lines if d["kind"] == "pxn"]
    assert len(pxn) == 1 and pxn[0]["proxy"]["peer"] == 5 and pxn[0]["proxy"]["steps"] == 2


@needs_cxx
def test_harness_records_summarise_into_columns(harness_records):
    _, lines = harness_records
    case = nccl_records.between_marks(lines, "begin warmup", "end warmup")
    summary = nccl_records.rank_summary(case, iters=5, plugin_loaded=True)
    assert summary["tasks"] == 5 and summary["incomplete"] == 1 and summary["even"]
    assert summary["channels"] == 2
    # the plugin's host stamps follow the GPU stamps by the observation delay only
    assert summary["gpu_to_host_ns"] is not None
    cols = nccl_records.case_columns([summary], world_size=4)
    assert cols["nccl_algo"] == "Ring" and cols["nccl_proto"] in ("Simple", "LL128", "LL")
    # per-iteration kernel spans 250, 100, 10, 12, 50 us -> median 50
    assert cols["kernel_us"] == pytest.approx(50.0)
    assert "1 task(s) without every kernel channel's end" in cols["profile_note"]


def test_one_rank_without_events_says_so():
    summary = nccl_records.rank_summary([], iters=20, plugin_loaded=True)
    cols = nccl_records.case_columns([summary], world_size=1)
    assert cols["profile_note"] == "no events (1 rank)" and cols["kernel_us"] is None
    cols = nccl_records.case_columns([summary, summary], world_size=2)
    assert cols["profile_note"].startswith("no events:")
    not_loaded = nccl_records.rank_summary(None, iters=20, plugin_loaded=False)
    assert "did not load" in nccl_records.case_columns([not_loaded], world_size=1)["profile_note"]


@needs_cxx
def test_plugin_without_output_folder_asks_for_nothing(plugin, tmp_path):
    """Loaded by NCCL but not asked for (no COMMBENCH_NCCL_PROFILE_DIR): mask 0, no file, no cost."""
    exe = tmp_path / "init_only"
    src = tmp_path / "init_only.cc"
    src.write_text('#include <dlfcn.h>\n#include <stdio.h>\n#include "profiler_abi.h"\n'
                   'int main(int, char** v) { void* l = dlopen(v[1], RTLD_NOW);\n'
                   '  cbp_plugin_v5* p = (cbp_plugin_v5*)dlsym(l, "ncclProfiler_v5"); void* c = (void*)1; int m = -1;\n'
                   '  int r = p->init(&c, 1, &m, "x", 1, 2, 0, 0); printf("%d %d %d\\n", r, m, c == 0);\n'
                   '  return p->finalize(c); }\n')
    subprocess.run(["g++", f"-I{plugin_build.source_dir()}", str(src), "-o", str(exe), "-ldl"], check=True)
    proc = subprocess.run([str(exe), str(plugin)], capture_output=True, text=True, env={"PATH": "/usr/bin"},
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == ["0", "0", "1"]
    assert not list(tmp_path.glob("nccl-*.jsonl"))


@needs_cxx
def test_capture_in_a_rank_with_a_one_rank_communicator(plugin, tmp_path, monkeypatch):
    """What a rank does on one GPU: NCCL loaded the plugin and made a 1-rank communicator (init),
    which emits no task events; the Case's row must say "no events (1 rank)"."""
    import ctypes

    from commbench.profile import nccl_plugin

    folder = tmp_path / "traces" / "nccl"
    folder.mkdir(parents=True)
    monkeypatch.setenv(nccl_plugin.PLUGIN_ENV, str(plugin))
    monkeypatch.setenv(nccl_plugin.ENV_DIR, str(folder))
    monkeypatch.delenv(nccl_plugin.ENV_UNAVAILABLE, raising=False)
    monkeypatch.setattr(nccl_plugin, "nccl_version_reason", lambda: None)
    assert nccl_plugin._plugin_handle() is None          # not loaded yet: never loaded by us
    lib = ctypes.CDLL(str(plugin), mode=ctypes.RTLD_GLOBAL)   # as NCCL's dlopen does

    init_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                              ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_void_p)
    fini_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    class Table(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("init", init_t), ("start", ctypes.c_void_p),
                    ("stop", ctypes.c_void_p), ("record", ctypes.c_void_p), ("finalize", fini_t)]

    table = Table.in_dll(lib, "ncclProfiler_v5")
    ctx, mask = ctypes.c_void_p(), ctypes.c_int()
    assert table.init(ctypes.byref(ctx), 42, ctypes.byref(mask), b"one", 1, 1, 0, None) == 0 and mask.value
    try:
        cap = nccl_plugin.NcclCapture("case1", iters=20)
        assert cap.reason is None
        cap.begin()
        summary = cap.end()
        assert summary["plugin_loaded"] and summary["marks"] and summary["tasks"] == 0
        cols = nccl_plugin.case_columns([summary], world_size=1)
        assert cols["profile_note"] == "no events (1 rank)"
        # a second Case reads only what was added since the first
        cap2 = nccl_plugin.NcclCapture("case2", iters=20)
        cap2.begin()
        assert cap2.end()["marks"]
    finally:
        table.finalize(ctx)
    lines = nccl_records.read_lines(nccl_plugin.own_files(folder)[0])
    assert [d["kind"] for d in lines] == ["init", "mark", "mark", "mark", "mark", "finalize"]


def test_capture_says_why_when_unavailable(monkeypatch):
    from commbench.profile import nccl_plugin

    monkeypatch.setenv(nccl_plugin.ENV_UNAVAILABLE, "NCCL profiler plugin not built: no g++")
    cap = nccl_plugin.NcclCapture("c", iters=5)
    cap.begin()
    cols = nccl_plugin.case_columns([cap.end()], world_size=2)
    assert cols == {"profile_note": "NCCL profiler plugin not built: no g++"}
    monkeypatch.delenv(nccl_plugin.ENV_UNAVAILABLE)
    monkeypatch.delenv(nccl_plugin.ENV_DIR, raising=False)
    assert nccl_plugin.NcclCapture("c", 5).reason == "NCCL profiler not set up for this launch"
