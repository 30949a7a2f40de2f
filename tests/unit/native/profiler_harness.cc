// Drives the commbench NCCL profiler plugin the way NCCL does, without NCCL or a GPU.
//
//   profiler_harness PLUGIN.so
//
// Loads the plugin with dlopen, finds `ncclProfiler_v5` as NCCL does, and plays
// one communicator (rank 1 of 4) through the documented event order: API events
// and tasks from the application thread, kernel channels, proxy ops and steps
// from a second ("proxy") thread. test_nccl_profiler_plugin.py checks what the
// plugin wrote. Every timestamp the GPU would give is chosen here, so durations
// are known exactly.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <thread>

#include "profiler_abi.h"

static cbp_plugin_v5* P;
static void* ctx;

static void logger(int, unsigned long, const char*, int, const char* fmt, ...) { (void)fmt; }

static void* start(uint64_t type, void* parent, cbp_descr d) {
  d.type = type;
  d.parent = parent;
  d.rank = 1;
  void* h = NULL;
  P->start_event(ctx, &h, &d);
  return h;
}

static void state(void* h, int s, cbp_state_args* a) { P->record_state(h, s, a); }
static void stop(void* h) { P->stop_event(h); }

static void* coll(void* parent, uint64_t seq, const char* func, size_t count, int nch, const char* algo,
                  const char* proto) {
  cbp_descr d = {};
  d.coll.seq = seq;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.dtype = "ncclFloat32";
  d.coll.n_channels = (uint8_t)nch;
  d.coll.n_warps = 16;
  d.coll.algo = algo;
  d.coll.proto = proto;
  return start(CBP_EV_COLL, parent, d);
}

static void kernel_channel(void* task, int ch, uint64_t gpu_start, uint64_t gpu_stop) {
  cbp_descr d = {};
  d.kernel_ch.channel = (uint8_t)ch;
  d.kernel_ch.gpu_start_ns = gpu_start;
  void* k = start(CBP_EV_KERNEL_CH, task, d);
  cbp_state_args a = {};
  a.kernel_ch.gpu_stop_ns = gpu_stop;
  state(k, CBP_STATE_KERNEL_CH_STOP, &a);
  stop(k);
}

static void proxy_op(void* task, int ch, int peer, int is_send, int n_steps, size_t step_bytes, pid_t pid) {
  cbp_descr d = {};
  d.proxy_op.pid = pid;
  d.proxy_op.channel = (uint8_t)ch;
  d.proxy_op.peer = peer;
  d.proxy_op.n_steps = n_steps;
  d.proxy_op.chunk_bytes = (int)step_bytes;
  d.proxy_op.is_send = is_send;
  void* op = start(CBP_EV_PROXY_OP, task, d);
  state(op, CBP_STATE_PROXY_OP_IN_PROGRESS, NULL);
  for (int i = 0; i < n_steps; ++i) {
    cbp_descr sd = {};
    sd.proxy_step.step = i;
    void* s = start(CBP_EV_PROXY_STEP, op, sd);
    cbp_state_args a = {};
    a.proxy_step.bytes = step_bytes;
    if (is_send) {
      state(s, CBP_STATE_STEP_SEND_GPU_WAIT, NULL);
      state(s, CBP_STATE_STEP_SEND_WAIT, &a);
    } else {
      state(s, CBP_STATE_STEP_RECV_WAIT, NULL);
      state(s, CBP_STATE_STEP_RECV_FLUSH_WAIT, &a);
      state(s, CBP_STATE_STEP_RECV_GPU_WAIT, NULL);
    }
    stop(s);
  }
  stop(op);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  P = (cbp_plugin_v5*)dlsym(lib, "ncclProfiler_v5");
  auto mark = (int (*)(const char*, int))dlsym(lib, "commbench_profiler_mark");
  if (!P || !mark) {
    fprintf(stderr, "plugin lacks ncclProfiler_v5 or commbench_profiler_mark\n");
    return 1;
  }
  int mask = 0;
  if (P->init(&ctx, 0xC0FFEEull, &mask, "harness", 1, 4, 1, logger) != CBP_OK || ctx == NULL) {
    fprintf(stderr, "init failed\n");
    return 1;
  }
  printf("name=%s mask=%d\n", P->name, mask);
  mark("begin warmup", 0);

  // 1) AllReduce, 1 MiB of float32, 2 channels, one network peer: an implicit group.
  void* group = start(CBP_EV_GROUP_API, NULL, cbp_descr{});
  cbp_descr api = {};
  api.coll_api.func = "AllReduce";
  api.coll_api.count = 262144;
  api.coll_api.dtype = "ncclFloat32";
  void* coll_api = start(CBP_EV_COLL_API, group, api);
  void* ar = coll(coll_api, 7, "AllReduce", 262144, 2, "Ring", "Simple");
  stop(ar);  // enqueued
  stop(coll_api);
  stop(group);
  std::thread proxy([&] {
    kernel_channel(ar, 0, 1000000, 1250000);  // 250 us
    proxy_op(ar, 0, 2, 1, 4, 65536, getpid());
    proxy_op(ar, 0, 0, 0, 4, 65536, getpid());
    kernel_channel(ar, 1, 1000500, 1249500);  // 249 us; the task spans 250 us
  });
  proxy.join();

  // 2) AllGather whose kernel finishes before NCCL reports the task enqueued.
  group = start(CBP_EV_GROUP_API, NULL, cbp_descr{});
  api.coll_api.func = "AllGather";
  coll_api = start(CBP_EV_COLL_API, group, api);
  void* ag = coll(coll_api, 8, "AllGather", 65536, 1, "Ring", "LL128");
  std::thread proxy2([&] { kernel_channel(ag, 0, 2000000, 2100000); });  // 100 us
  proxy2.join();
  stop(ag);
  stop(coll_api);
  stop(group);

  // 3) A user group of a send and a receive (point-to-point tasks, one channel each).
  group = start(CBP_EV_GROUP_API, NULL, cbp_descr{});
  cbp_descr papi = {};
  papi.p2p_api.func = "Send";
  papi.p2p_api.count = 1024;
  papi.p2p_api.dtype = "ncclFloat32";
  void* send_api = start(CBP_EV_P2P_API, group, papi);
  cbp_descr pd = {};
  pd.p2p.func = "Send";
  pd.p2p.dtype = "ncclFloat32";
  pd.p2p.count = 1024;
  pd.p2p.peer = 2;
  pd.p2p.n_channels = 1;
  void* send = start(CBP_EV_P2P, send_api, pd);
  stop(send);
  stop(send_api);
  papi.p2p_api.func = "Recv";
  void* recv_api = start(CBP_EV_P2P_API, group, papi);
  pd.p2p.func = "Recv";
  pd.p2p.peer = 0;
  void* recv = start(CBP_EV_P2P, recv_api, pd);
  stop(recv);
  stop(recv_api);
  stop(group);
  std::thread proxy3([&] {
    kernel_channel(send, 0, 3000000, 3010000);
    kernel_channel(recv, 1, 3000000, 3012000);
    // PXN: an op of another process arrives with that process's parent pointer; the
    // plugin must record it on its own and never follow the pointer.
    proxy_op((void*)0x1234, 3, 5, 1, 2, 4096, getpid() + 1);
  });
  proxy3.join();

  // 4) A task whose second channel never reports its end: the mark writes it as incomplete.
  group = start(CBP_EV_GROUP_API, NULL, cbp_descr{});
  api.coll_api.func = "AllReduce";
  coll_api = start(CBP_EV_COLL_API, group, api);
  void* stuck = coll(coll_api, 9, "AllReduce", 262144, 2, "Tree", "LL");
  stop(stuck);
  stop(coll_api);
  stop(group);
  kernel_channel(stuck, 0, 4000000, 4050000);
  cbp_descr kd = {};
  kd.kernel_ch.channel = 1;
  kd.kernel_ch.gpu_start_ns = 4000100;
  void* open_ch = start(CBP_EV_KERNEL_CH, stuck, kd);

  int comms = mark("end warmup", 20);
  printf("comms=%d\n", comms);
  // A channel end reported after its task was written counts as late and changes nothing.
  cbp_state_args late = {};
  late.kernel_ch.gpu_stop_ns = 4060000;
  state(open_ch, CBP_STATE_KERNEL_CH_STOP, &late);
  stop(open_ch);
  P->finalize(ctx);
  printf("done\n");
  return 0;
}
