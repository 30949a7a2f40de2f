// GPU producers. One warp is one producer: lane k builds the k-th command of
// a batch; the proxy path posts the batch into the producer's ring, the
// direct path decodes the same commands and copies with SM loads/stores.
// Every wait is bounded: on timeout the kernel records why and exits.
#pragma once
#include <cuda_runtime.h>
#include "proxy_ring.cuh"

namespace cbproxy {

constexpr unsigned kFullMask = 0xffffffffu;

struct KernelArgs {
  RingSet rings;              // device view (unused on the direct path)
  int direct;                 // 1: transfers by the SMs, no proxy
  int op;                     // kOpAck (no data) or kOpCopy
  int layout;                 // 0: K commands per producer into own regions; 1: chunks of one message
  uint32_t num_producers;
  uint32_t cmds_per_producer; // layout 0
  uint32_t batch;             // commands per reservation, 1..32
  uint64_t size_bytes;        // per command (layout 0) or whole message (layout 1)
  uint64_t chunk_bytes;       // layout 1
  uint64_t num_regions;       // layout 0: regions of size_bytes in the windows
  const char* src;
  char* dst;
  int dst_system;             // direct: destination is host or peer memory
  uint32_t* posted;           // per producer: commands issued so far (device memory)
  uint32_t* direct_done;      // per producer: commands the direct path executed
  int* error;                 // [0] ErrorCode, [1] producer
  uint64_t timeout_ns;        // longest wait without progress
  int publish;                // Publish: how a lane makes its slot visible
  int owned_head;             // 1: every ring has one producer, which counts tickets in a register
  long long poll_delay_cycles; // SM cycles to wait after posting before the first completion read
};

__device__ __forceinline__ uint64_t gtimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool aborted(const KernelArgs& a) { return *(volatile int*)a.error != 0; }

__device__ __forceinline__ void fail(const KernelArgs& a, int code, uint32_t producer) {
  if (atomicCAS(a.error, 0, code) == 0) a.error[1] = (int)producer;
}

// The ring's reservation counter at kernel start (owned heads: the warp keeps it in a register).
__device__ __forceinline__ unsigned long long load_head(const KernelArgs& a, uint32_t ring) {
  return a.owned_head ? *(volatile unsigned long long*)&a.rings.heads[(size_t)ring * kTailStride] : 0;
}

__device__ __forceinline__ void store_head(const KernelArgs& a, uint32_t ring, unsigned long long head, int lane) {
  if (a.owned_head && lane == 0) a.rings.heads[(size_t)ring * kTailStride] = head;
}

// Make one slot visible to the proxy; the tag in w0 (the slot's last word) publishes it.
__device__ __forceinline__ void publish_slot(const KernelArgs& a, Cmd* slot, Cmd c, uint32_t tag) {
  if (a.publish == kPublishVec16) {   // one 16-byte write, the tag word last in it
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(slot), "r"(c.w1), "r"(c.src8), "r"(c.dst8), "r"(c.w0 | tag) : "memory");
    return;
  }
  volatile Cmd* s = slot;
  s->w1 = c.w1;
  s->src8 = c.src8;
  s->dst8 = c.dst8;
  if (a.publish == kPublishRelease) {   // orders the body before the tag, at system scope
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(&slot->w0), "r"(c.w0 | tag) : "memory");
    return;
  }
  __threadfence_system();  // body visible before the tag that publishes it
  s->w0 = c.w0 | tag;
}

// Lanes < n publish their command; returns false (whole warp) on timeout/abort. `head` is the
// warp's own ticket counter when a.owned_head (the same value in every lane), else unused.
__device__ bool warp_post(const KernelArgs& a, uint32_t ring, Cmd c, int n, int lane,
                          unsigned long long& cached_tail, uint32_t producer, unsigned long long& head) {
  unsigned long long base = 0;
  if (a.owned_head) {
    base = head;   // no other producer uses this ring: no atomic round trip to L2
    head += (unsigned long long)n;
  } else {
    if (lane == 0) base = atomicAdd(&a.rings.heads[(size_t)ring * kTailStride], (unsigned long long)n);
    base = __shfl_sync(kFullMask, base, 0);
  }
  bool ok = true;
  if (lane < n) {
    const unsigned long long t = base + lane;
    const uint32_t S = a.rings.num_slots;
    if (t >= cached_tail + S) {  // ring looks full: back-pressure until the proxy frees this slot
      volatile unsigned long long* tailp = a.rings.tails + (size_t)ring * kTailStride;
      const uint64_t deadline = gtimer_ns() + a.timeout_ns;
      for (uint32_t spin = 0;; ++spin) {
        cached_tail = *tailp;
        if (t < cached_tail + S) break;
        if ((spin & 15) == 15 && (aborted(a) || gtimer_ns() > deadline)) {
          if (!aborted(a)) fail(a, kErrSlotTimeout, producer);
          ok = false;
          break;
        }
      }
    }
    if (ok) publish_slot(a, a.rings.slots + (size_t)ring * S + (t & (S - 1)), c, lap_tag(t, S));
  }
  return __all_sync(kFullMask, ok);
}

// Lane 0 only: wait until the proxy has completed `target` commands of this producer.
// The completion lives in host memory: each read is a PCIe round trip, and the first one, sent
// right behind a single command, always arrives before the proxy can have answered. Sending it
// poll_delay_cycles later (`hold_first_read`) lets it arrive just after the answer instead of
// one round trip early. After a batch the proxy has many commands to drain: no hold there.
__device__ bool wait_done(const KernelArgs& a, uint32_t producer, uint32_t target, bool hold_first_read) {
  if (hold_first_read && a.poll_delay_cycles > 0) {
    const long long k0 = clock64();
    while (clock64() - k0 < a.poll_delay_cycles) {}
  }
  volatile uint32_t* d = a.rings.done + (size_t)producer * kDoneStride;
  if ((int32_t)(*d - target) >= 0) return true;
  const uint64_t deadline = gtimer_ns() + a.timeout_ns;
  for (uint32_t spin = 0;; ++spin) {
    if ((int32_t)(*d - target) >= 0) return true;
    if ((spin & 15) == 15) {
      if (aborted(a)) return false;
      if (gtimer_ns() > deadline) { fail(a, kErrCompletionTimeout, producer); return false; }
    }
  }
}

__device__ void warp_copy(const char* src, char* dst, uint64_t n, int lane) {
  if ((((uintptr_t)src | (uintptr_t)dst | n) & 15) == 0) {
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    const uint64_t m = n / 16;
    uint64_t i = lane;
    for (; i + 96 < m; i += 128) {  // four loads in flight per lane
      uint4 v0 = s[i], v1 = s[i + 32], v2 = s[i + 64], v3 = s[i + 96];
      d[i] = v0; d[i + 32] = v1; d[i + 64] = v2; d[i + 96] = v3;
    }
    for (; i < m; i += 32) d[i] = s[i];
  } else {
    const uint2* s = (const uint2*)src;
    uint2* d = (uint2*)dst;
    for (uint64_t i = lane; i < n / 8; i += 32) d[i] = s[i];
  }
}

// Command i of producer p: where it reads and writes, and how much.
__device__ __forceinline__ void place(const KernelArgs& a, uint32_t p, uint32_t i, uint64_t& off, uint64_t& size) {
  if (a.layout == 0) {
    off = (((uint64_t)p * a.cmds_per_producer + i) % a.num_regions) * a.size_bytes;
    size = a.size_bytes;
  } else {
    off = ((uint64_t)i * a.num_producers + p) * a.chunk_bytes;
    size = min(a.chunk_bytes, a.size_bytes - off);
  }
}

__device__ __forceinline__ uint32_t commands_of(const KernelArgs& a, uint32_t p) {
  if (a.layout == 0) return a.cmds_per_producer;
  const uint64_t chunks = (a.size_bytes + a.chunk_bytes - 1) / a.chunk_bytes;
  return p < chunks ? (uint32_t)((chunks - p + a.num_producers - 1) / a.num_producers) : 0;
}

__device__ void execute_direct(const KernelArgs& a, const Cmd& c, int lane) {
  if (cmd_op(c.w1) == kOpCopy)
    warp_copy(a.src + (uint64_t)c.src8 * 8, a.dst + (uint64_t)c.dst8 * 8, cmd_size(c.w0), lane);
}

__device__ __forceinline__ Cmd shfl_cmd(const Cmd& c, int src_lane) {
  return Cmd{__shfl_sync(kFullMask, c.w1, src_lane), __shfl_sync(kFullMask, c.src8, src_lane),
             __shfl_sync(kFullMask, c.dst8, src_lane), __shfl_sync(kFullMask, c.w0, src_lane)};
}

// Rate and bandwidth: every producer issues its commands in batches.
__global__ void stream_kernel(KernelArgs a) {
  const int lane = threadIdx.x & 31;
  const uint32_t p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (p >= a.num_producers) return;
  const uint32_t count = commands_of(a, p);
  const uint32_t posted0 = a.posted[p];
  const uint32_t ring = a.direct ? 0 : p % a.rings.num_rings;
  unsigned long long cached_tail = 0;
  unsigned long long head = a.direct ? 0 : load_head(a, ring);
  for (uint32_t base = 0; base < count; base += a.batch) {
    const int n = (int)min(a.batch, count - base);
    Cmd c{};
    if (lane < n) {
      uint64_t off, size;
      place(a, p, base + lane, off, size);
      c = make_cmd(a.op, p, posted0 + base + lane, size, off, off);
    }
    if (a.direct) {
      for (int j = 0; j < n; ++j) execute_direct(a, shfl_cmd(c, j), lane);
      if (a.dst_system) __threadfence_system(); else __threadfence();
      if (lane == 0) atomicAdd(&a.direct_done[p], (uint32_t)n);
    } else if (!warp_post(a, ring, c, n, lane, cached_tail, p, head)) {
      return;
    }
  }
  if (!a.direct) store_head(a, ring, head, lane);
  if (lane == 0) {
    a.posted[p] = posted0 + count;
    if (!a.direct && count) wait_done(a, p, posted0 + count, false);
  }
}

// Round trip of one command at a time by producer 0; per-iteration SM cycles
// plus a globaltimer/clock pair to convert cycles to time.
__global__ void latency_kernel(KernelArgs a, uint32_t iters, long long* cycles, unsigned long long* calib) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32 || blockIdx.x) return;
  const uint32_t posted0 = a.posted[0];
  unsigned long long cached_tail = 0;
  unsigned long long head = a.direct ? 0 : load_head(a, 0);
  const uint64_t g0 = gtimer_ns();
  const long long k0 = clock64();
  uint32_t it = 0;
  for (; it < iters; ++it) {
    const long long c0 = clock64();
    Cmd c = make_cmd(a.op, 0, posted0 + it, a.size_bytes, 0, 0);
    if (a.direct) {
      execute_direct(a, c, lane);
      if (a.dst_system) __threadfence_system(); else __threadfence();
      if (lane == 0) atomicAdd(&a.direct_done[0], 1u);
    } else {
      if (!warp_post(a, 0, c, 1, lane, cached_tail, 0, head)) break;
      bool ok = true;
      if (lane == 0) ok = wait_done(a, 0, posted0 + it + 1, true);
      if (!__shfl_sync(kFullMask, ok, 0)) { ++it; break; }
    }
    __syncwarp();
    if (lane == 0) cycles[it] = clock64() - c0;
  }
  if (!a.direct) store_head(a, 0, head, lane);
  if (lane == 0) {
    a.posted[0] = posted0 + it;
    calib[0] = gtimer_ns() - g0;
    calib[1] = (unsigned long long)(clock64() - k0);
  }
}

}  // namespace cbproxy
