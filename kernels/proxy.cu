// commbench proxy library: GPU producer kernels, the command ring, native
// proxy threads with pluggable executors, and the extern "C" entry points
// used by commbench/proxy/native.py.
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include "proxy_engine.cuh"
#include "proxy_kernels.cuh"
#include "proxy_ring.cuh"

using namespace cbproxy;

namespace {

WriteValue32Fn load_write_value() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return (WriteValue32Fn)fn;
}

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

extern "C" {

// Returns an engine handle or nullptr; *status gets 0 or the error (-1 bad config, -2 no driver entry point).
void* proxy_engine_create(int device, int host_only, uint32_t num_threads, uint32_t num_slots,
                          uint32_t num_producers, int executor, int use_batch, const void* src, void* dst,
                          uint64_t stall_after, uint64_t drop_every, int* status) {
  EngineConfig cfg;
  cfg.device = device;
  cfg.host_only = host_only;
  cfg.num_rings = num_threads;
  cfg.num_slots = num_slots;
  cfg.num_producers = num_producers;
  cfg.executor = executor;
  cfg.use_batch = use_batch;
  cfg.src = (const char*)src;
  cfg.dst = (char*)dst;
  cfg.stall_after = stall_after;
  cfg.drop_every = drop_every;
  WriteValue32Fn wv = nullptr;
  if (executor == 1 && !host_only) {
    wv = load_write_value();
    if (!wv) { *status = -2; return nullptr; }
  }
  Engine* e = new Engine(cfg);
  *status = e->create(wv);
  if (*status) { delete e; return nullptr; }
  return e;
}

void proxy_engine_destroy(void* engine) { delete (Engine*)engine; }

// out: consumed, order_errors, first executor error, stalled threads
void proxy_engine_counters(void* engine, uint64_t* out) {
  Engine* e = (Engine*)engine;
  out[0] = out[1] = out[2] = out[3] = 0;
  for (uint32_t r = 0; r < e->config().num_rings; ++r) {
    const ThreadStats& s = e->stats(r);
    out[0] += __atomic_load_n(&s.consumed, __ATOMIC_ACQUIRE);
    out[1] += __atomic_load_n(&s.order_errors, __ATOMIC_ACQUIRE);
    if (!out[2] && s.exec_error) out[2] = (uint64_t)s.exec_error;
    out[3] += (uint64_t)s.stalled;
  }
}

// Commands executed per producer, as counted by the proxy threads.
void proxy_engine_executed(void* engine, uint32_t* out, uint32_t n) {
  Engine* e = (Engine*)engine;
  for (uint32_t p = 0; p < n && p < e->config().num_producers; ++p) out[p] = e->executed(p);
}

static KernelArgs make_args(void* engine, int direct, int op, int layout, uint32_t num_producers,
                            uint32_t cmds_per_producer, uint32_t batch, uint64_t size_bytes,
                            uint64_t chunk_bytes, uint64_t num_regions, const void* src, void* dst,
                            int dst_system, uint32_t* posted, uint32_t* direct_done, int* error,
                            uint64_t timeout_ns, int publish, int head_mode, uint32_t poll_delay_ns) {
  KernelArgs a{};
  if (engine) a.rings = ((Engine*)engine)->dev_view();
  a.publish = publish;
  // head_mode 1 (auto): a producer alone on its ring counts its tickets itself; 0: always atomic
  a.owned_head = engine && head_mode == 1 && num_producers <= a.rings.num_rings;
  if (poll_delay_ns) {   // ns to SM cycles at the device's clock (kHz)
    int dev = engine ? ((Engine*)engine)->config().device : 0, khz = 0;
    if (!engine) cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    a.poll_delay_cycles = (long long)poll_delay_ns * khz / 1000000;
  }
  a.direct = direct; a.op = op; a.layout = layout;
  a.num_producers = num_producers; a.cmds_per_producer = cmds_per_producer; a.batch = batch;
  a.size_bytes = size_bytes; a.chunk_bytes = chunk_bytes; a.num_regions = num_regions ? num_regions : 1;
  a.src = (const char*)src; a.dst = (char*)dst; a.dst_system = dst_system;
  a.posted = posted; a.direct_done = direct_done; a.error = error; a.timeout_ns = timeout_ns;
  return a;
}

static bool valid_delivery(int publish, uint32_t poll_delay_ns) {
  return publish >= kPublishFence && publish <= kPublishVec16 && poll_delay_ns <= 100000;
}

// Rate/bandwidth kernel: num_ctas x warps_per_cta producers. Returns a cudaError_t.
int proxy_launch_stream(void* engine, int direct, int op, int layout, uint32_t num_ctas, uint32_t warps_per_cta,
                        uint32_t cmds_per_producer, uint32_t batch, uint64_t size_bytes, uint64_t chunk_bytes,
                        uint64_t num_regions, const void* src, void* dst, int dst_system, uint32_t* posted,
                        uint32_t* direct_done, int* error, uint64_t timeout_ns, int publish, int head_mode,
                        uint32_t poll_delay_ns, void* stream) {
  if (!direct && !engine) return (int)cudaErrorInvalidValue;
  if (batch < 1 || batch > 32) return (int)cudaErrorInvalidValue;
  if (!valid_delivery(publish, poll_delay_ns)) return (int)cudaErrorInvalidValue;
  KernelArgs a = make_args(engine, direct, op, layout, num_ctas * warps_per_cta, cmds_per_producer, batch,
                           size_bytes, chunk_bytes, num_regions, src, dst, dst_system, posted, direct_done,
                           error, timeout_ns, publish, head_mode, poll_delay_ns);
  stream_kernel<<<num_ctas, warps_per_cta * 32, 0, (cudaStream_t)stream>>>(a);
  return (int)cudaGetLastError();
}

int proxy_launch_latency(void* engine, int direct, int op, uint32_t iters, uint64_t size_bytes, const void* src,
                         void* dst, int dst_system, uint32_t* posted, uint32_t* direct_done, int* error,
                         uint64_t timeout_ns, int publish, int head_mode, uint32_t poll_delay_ns, long long* cycles,
                         unsigned long long* calib, void* stream) {
  if (!direct && !engine) return (int)cudaErrorInvalidValue;
  if (!valid_delivery(publish, poll_delay_ns)) return (int)cudaErrorInvalidValue;
  KernelArgs a = make_args(engine, direct, op, 0, 1, iters, 1, size_bytes, size_bytes, 1, src, dst, dst_system,
                           posted, direct_done, error, timeout_ns, publish, head_mode, poll_delay_ns);
  latency_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(a, iters, cycles, calib);
  return (int)cudaGetLastError();
}

int proxy_enable_peer(int device, int peer) {
  int can = 0;
  cudaError_t e = cudaDeviceCanAccessPeer(&can, device, peer);
  if (e != cudaSuccess) return (int)e;
  if (!can) return (int)cudaErrorPeerAccessUnsupported;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) { cudaGetLastError(); e = cudaSuccess; }
  cudaSetDevice(prev);
  return (int)e;
}

const char* proxy_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// CPU test of the ring: host producer threads, proxy threads with the ack
// executor. out: executed, order_errors, lost, extra, backpressure_waits, timeouts.
int proxy_selftest(uint32_t producers, uint32_t threads, uint32_t cmds, uint32_t slots, uint32_t batch,
                   uint64_t drop_every, uint64_t timeout_ms, uint64_t* out) {
  Engine eng([&] {
    EngineConfig c;
    c.host_only = 1; c.num_rings = threads; c.num_slots = slots; c.num_producers = producers;
    c.drop_every = drop_every;
    return c;
  }());
  if (batch < 1 || eng.create(nullptr)) return -1;
  const RingSet rs = eng.host_view();
  std::atomic<uint64_t> backpressure{0}, timeouts{0};
  const uint64_t timeout_ns = timeout_ms * 1000000ull;
  std::vector<std::thread> prods;
  for (uint32_t p = 0; p < producers; ++p) {
    prods.emplace_back([&, p] {
      const uint32_t ring = p % threads;
      unsigned long long* head = rs.heads + (size_t)ring * kTailStride;
      unsigned long long* tail = rs.tails + (size_t)ring * kTailStride;
      uint64_t cached_tail = 0;
      for (uint32_t i = 0; i < cmds; i += batch) {
        const uint32_t n = std::min(batch, cmds - i);
        const uint64_t base = __atomic_fetch_add(head, (unsigned long long)n, __ATOMIC_ACQ_REL);
        for (uint32_t k = 0; k < n; ++k) {
          const uint64_t t = base + k;
          if (t >= cached_tail + slots) {
            backpressure.fetch_add(1, std::memory_order_relaxed);
            const uint64_t deadline = now_ns() + timeout_ns;
            uint32_t spins = 0;
            while (t >= (cached_tail = __atomic_load_n(tail, __ATOMIC_ACQUIRE)) + slots) {
              if (now_ns() > deadline) { timeouts.fetch_add(1); return; }
              backoff(spins);
            }
          }
          Cmd c = make_cmd(kOpAck, p, i + k, 8, (uint64_t)p * 8, (uint64_t)(i + k) * 8);
          Cmd* s = rs.slots + (size_t)ring * slots + (t & (slots - 1));
          s->w1 = c.w1; s->src8 = c.src8; s->dst8 = c.dst8;
          __atomic_store_n(&s->w0, c.w0 | lap_tag(t, slots), __ATOMIC_RELEASE);
        }
      }
      const uint32_t* done = rs.done + (size_t)p * kDoneStride;
      const uint64_t deadline = now_ns() + timeout_ns;
      uint32_t spins = 0;
      while ((int32_t)(__atomic_load_n(done, __ATOMIC_ACQUIRE) - cmds) < 0) {
        if (now_ns() > deadline) { timeouts.fetch_add(1); return; }
        backoff(spins);
      }
    });
  }
  for (auto& t : prods) t.join();
  uint64_t counters[4];
  proxy_engine_counters(&eng, counters);
  out[0] = out[2] = out[3] = 0;
  for (uint32_t p = 0; p < producers; ++p) {
    const uint32_t x = eng.executed(p);
    out[0] += x;
    if (x < cmds) out[2] += cmds - x;
    if (x > cmds) out[3] += x - cmds;
  }
  out[1] = counters[1];
  out[4] = backpressure.load();
  out[5] = timeouts.load();
  return 0;
}

}  // extern "C"
