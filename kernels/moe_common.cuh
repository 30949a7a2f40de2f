// Shared pieces of the MoE dispatch/combine kernels: problem shape, workspace
// layout, cross-rank signalling over peer pointers, and row copies.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace moe {

// Problem shape, filled by the host launchers from an int array (see moe.py).
struct Dims {
  int rank, num_ranks, num_tokens, hidden, topk, num_experts, local_experts;
  int row_bytes;    // bytes of one dispatched row (hidden*2 BF16, hidden FP8)
  int num_scales;   // FP8: hidden/128 fp32 scales per row, else 0
  int max_tokens;   // low-latency: token budget per rank
};

// Byte offsets inside every rank's workspace; identical on all ranks so a
// peer's buffer is peer_base + offset.
struct Layout {
  long long cnt_in;         // u64[R]: tagged token count from each source rank
  long long done_in;        // u32[R]: per-source block arrival counters
  long long ready_in;       // u32[R]: combine entry barrier counters
  long long expert_cnt_in;  // i32[R][L]: tokens per (source, local expert)
  long long recv_src;       // i32[max_recv][2]: (source rank, source token)
  long long recv_topk_idx;  // i32[max_recv][K]: local expert or -1
  long long recv_topk_w;    // f32[max_recv][K]
  long long recv_x;         // u8[max_recv][row_bytes]
  long long recv_scales;    // f32[max_recv][num_scales]
  long long y;              // bf16[max_recv][H]: expert outputs fed to combine
  long long ll_cnt_in;      // u64[L][R]: tagged row count per (local expert, source)
  long long ll_recv_count;  // i32[L][R]: the counts, untagged, for combine
  long long ll_recv_src;    // i32[L][R][max_tokens]: token*K + k at the source
  long long ll_recv_x;      // u8[L][R][max_tokens][row_bytes]
  long long ll_recv_scales; // f32[L][R][max_tokens][num_scales]
  long long ll_y;           // bf16[L][R][max_tokens][H]
  long long ll_comb_buf;    // bf16[max_tokens][K][H]: rows returned to the source
  long long ll_comb_cnt;    // u64[E]: per-expert return counters (per-expert combine only)
  long long ll_send_x;      // u8[T][row_bytes]: NVSHMEM only, the input staged in symmetric memory
  long long ll_send_scales; // f32[T][num_scales]: NVSHMEM only, its FP8 scales
  long long ll_comb_flag;   // u64[max_tokens][K]: epoch of the last row returned to [token][k]
};

// Epoch of one kind of launch (dispatch or combine), kept on the device so a
// CUDA graph can replay the launch: every block reads value + 1 when it
// starts; the last block to finish stores it. Launches on one stream are
// ordered, so the next launch sees the stored value.
struct EpochCounter {
  uint32_t value;
  uint32_t blocks_done;
  uint32_t arrived;   // the flat dispatch's blocks that have sent (the last resets it)
};

template <typename T>
__device__ __forceinline__ T* at(uint64_t base, long long off) {
  return reinterpret_cast<T*>(base + off);
}

__device__ __forceinline__ uint64_t ld_acquire_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_acquire_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_u64(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Ranks sharing one GPU are time-sliced, so a wait can last milliseconds; a
// lost peer must still not hang the GPU forever: give up after this long.
constexpr uint64_t kTimeoutNs = 20ull * 1000 * 1000 * 1000;

__device__ __forceinline__ uint64_t tag(uint32_t epoch, uint32_t value) {
  return (uint64_t(epoch) << 32) | value;
}

// Wait until a tagged slot carries epoch >= `epoch`; returns its value, -1 on timeout.
__device__ int wait_tagged(const uint64_t* p, uint32_t epoch, int* err) {
  uint64_t start = now_ns();
  while (true) {
    uint64_t v = ld_acquire_u64(p);
    if (uint32_t(v >> 32) >= epoch) return int(uint32_t(v));
    if (*reinterpret_cast<volatile int*>(err) || now_ns() - start > kTimeoutNs) {
      atomicExch(err, 1);
      return -1;
    }
    __nanosleep(64);
  }
}

// Wait until a monotonic counter reaches `target`; false on timeout.
__device__ bool wait_count(const uint32_t* p, uint32_t target, int* err) {
  uint64_t start = now_ns();
  while (ld_acquire_u32(p) < target) {
    if (*reinterpret_cast<volatile int*>(err) || now_ns() - start > kTimeoutNs) {
      atomicExch(err, 1);
      return false;
    }
    __nanosleep(64);
  }
  return true;
}

__device__ bool wait_count64(const uint64_t* p, uint64_t target, int* err) {
  uint64_t start = now_ns();
  while (ld_acquire_u64(p) < target) {
    if (*reinterpret_cast<volatile int*>(err) || now_ns() - start > kTimeoutNs) {
      atomicExch(err, 1);
      return false;
    }
    __nanosleep(64);
  }
  return true;
}

// 16-byte load of data no one writes during the kernel (inputs, expert outputs): no L1 allocation.
__device__ __forceinline__ int4 ld_nc_int4(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// One warp copies `bytes` (a multiple of 16) with 16-byte accesses.
__device__ __forceinline__ void warp_copy16(void* dst, const void* src, int bytes, int lane) {
  int4* d = reinterpret_cast<int4*>(dst);
  const int4* s = reinterpret_cast<const int4*>(src);
  for (int i = lane; i < bytes / 16; i += 32) d[i] = __ldg(s + i);
}

__device__ __forceinline__ void warp_copy4(float* dst, const float* src, int n, int lane) {
  for (int i = lane; i < n; i += 32) dst[i] = src[i];
}

// One warp copies `bytes` (a multiple of 4): 16-byte accesses when both ends allow.
__device__ __forceinline__ void warp_copy(void* dst, const void* src, int bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15) == 0)
    warp_copy16(dst, src, bytes, lane);
  else
    warp_copy4(static_cast<float*>(dst), static_cast<const float*>(src), bytes / 4, lane);
}

// Eight BF16 values in an int4 -> accumulate scale * v into acc[8].
__device__ __forceinline__ void fma_bf16x8(float* acc, int4 v, float scale) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 f = __bfloat1622float2(h[j]);
    acc[2 * j] += scale * f.x;
    acc[2 * j + 1] += scale * f.y;
  }
}

__device__ __forceinline__ int4 pack_bf16x8(const float* acc) {
  int4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
  return out;
}

__device__ __forceinline__ uint32_t epoch_begin(const EpochCounter* c) {
  return *reinterpret_cast<const volatile uint32_t*>(&c->value) + 1;
}

// Call from every thread at the very end of the kernel.
__device__ __forceinline__ void epoch_end(EpochCounter* c, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&c->blocks_done, 1u) == gridDim.x - 1) {
      c->blocks_done = 0;
      *reinterpret_cast<volatile uint32_t*>(&c->value) = epoch;
      __threadfence();
    }
  }
}

inline Dims dims_from(const int* d) {
  return Dims{d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9]};
}

inline Layout layout_from(const long long* o) {
  Layout l;
  long long* dst = reinterpret_cast<long long*>(&l);
  for (unsigned i = 0; i < sizeof(Layout) / sizeof(long long); ++i) dst[i] = o[i];
  return l;
}

}  // namespace moe
