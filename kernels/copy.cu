// The copy family (families/copy): one copy of `bytes` by a copy engine (cudaMemcpyAsync) or by an
// SM kernel, host-to-device, device-to-host, within a GPU or between two GPUs, one way or both ways
// at once. The native timed loop (timed_loop.cu) calls cb_copy_enqueue once per op.
//
// The SM kernel: 16-byte loads and stores; each CTA copies tiles of UNROLL x 512 vectors (its
// loads all issued before its stores, so a thread has UNROLL reads in flight: a PCIe or NVLink read
// is a long round trip), the tiles of the grid contiguous, so the GPU streams through one window
// of memory at a time. Host memory reaches it through a device mapping (cudaHostAlloc mapped,
// cb_copy_host_alloc).
//
// Compile-time choices (defaults below; benchmarks/copy_sm_variants.py builds the others to compare):
//   CB_COPY_UNROLL        vectors in flight per thread
//   CB_COPY_CTAS_PER_SM   the default grid: CTAs of 512 threads per SM
//   CB_COPY_TILED         1: contiguous tiles per CTA (above); 0: plain grid-stride, UNROLL strides apart
//   CB_COPY_L2_256        1: loads ask L2 to fetch 256-byte blocks (ld.global.nc.L1::no_allocate.L2::256B)
// On one H200 at 1 GiB (2026-12-03) the tiles beat grid-stride within a GPU (81.8% of HBM / 2
// against 81.0%); the 256-byte fetches cost 2 points there and changed nothing over PCIe (80-83% of
// it, whatever the build; the copy engines reach 87-88%); grid size and unroll moved it by about 1%.
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef CB_COPY_UNROLL
#define CB_COPY_UNROLL 4
#endif
#ifndef CB_COPY_CTAS_PER_SM
#define CB_COPY_CTAS_PER_SM 4
#endif
#ifndef CB_COPY_TILED
#define CB_COPY_TILED 1
#endif
#ifndef CB_COPY_L2_256
#define CB_COPY_L2_256 0
#endif

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = CB_COPY_UNROLL;
constexpr int kCtasPerSm = CB_COPY_CTAS_PER_SM;

__device__ __forceinline__ uint4 load16(const uint4* p) {
#if CB_COPY_L2_256
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#else
  return *p;
#endif
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm)
copy16(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n_vec,
       uint8_t* __restrict__ dst_tail, const uint8_t* __restrict__ src_tail, int tail_bytes) {
#if CB_COPY_TILED
  constexpr size_t kTile = static_cast<size_t>(kThreads) * kUnroll;
  const size_t step = static_cast<size_t>(gridDim.x) * kTile;
  for (size_t base = blockIdx.x * kTile; base < n_vec; base += step) {
    const size_t i = base + threadIdx.x;
    if (base + kTile <= n_vec) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load16(src + i + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dst[i + u * kThreads] = v[u];
    } else {
      for (int u = 0; u < kUnroll; ++u)
        if (i + u * kThreads < n_vec) dst[i + u * kThreads] = load16(src + i + u * kThreads);
    }
  }
#else
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n_vec; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load16(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n_vec; i += stride) dst[i] = load16(src + i);
#endif
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_bytes) dst_tail[threadIdx.x] = src_tail[threadIdx.x];
}

// Runs `fn` with `dev` as the current device (a kernel must be launched, and an event recorded, on
// its stream's device), then restores the caller's device.
template <typename Fn>
int on_device(int dev, Fn fn) {
  int cur = 0;
  cudaError_t err = cudaGetDevice(&cur);
  if (err != cudaSuccess) return err;
  if (cur != dev && (err = cudaSetDevice(dev)) != cudaSuccess) return err;
  int rc = fn();
  if (cur != dev) {
    cudaError_t back = cudaSetDevice(cur);
    if (rc == 0 && back != cudaSuccess) rc = back;
  }
  return rc;
}

int launch_sm(void* dst, const void* src, size_t bytes, int blocks, cudaStream_t s) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16) return cudaErrorMisalignedAddress;
  const size_t n_vec = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
#if CB_COPY_TILED
  const size_t per_cta = static_cast<size_t>(kThreads) * kUnroll;
#else
  const size_t per_cta = kThreads;
#endif
  size_t need = (n_vec + per_cta - 1) / per_cta;  // no CTA without a vector to copy
  int grid = static_cast<int>(need < static_cast<size_t>(blocks) ? need : static_cast<size_t>(blocks));
  if (grid < 1) grid = 1;
  copy16<<<grid, kThreads, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), n_vec,
                                   static_cast<uint8_t*>(dst) + n_vec * 16,
                                   static_cast<const uint8_t*>(src) + n_vec * 16, tail);
  return cudaGetLastError();
}

int copy_on(int engine, void* dst, const void* src, size_t bytes, int blocks, int dev, cudaStream_t s) {
  return on_device(dev, [&]() -> int {
    if (engine == 0) return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    return launch_sm(dst, src, bytes, blocks, s);
  });
}

}  // namespace

extern "C" {

int cb_copy_threads() { return kThreads; }
int cb_copy_ctas_per_sm() { return kCtasPerSm; }

// One op as the native timed loop enqueues it (mirrored by families/copy/native.py). Call k uses
// the slot k mod slots of each pool (offset `stride` x slot), so that no call reads the previous
// one's data from L2. Direction B (bidir) runs on stream2 (device dev2) beside direction A on the
// timed stream: fork is recorded on the timed stream (device dev), join on stream2 (device dev2).
struct cb_copy_op {
  int engine;  // 0 copy engine (cudaMemcpyAsync), 1 SM kernel
  int bidir;
  char* dst;
  const char* src;
  char* dst2;
  const char* src2;
  size_t bytes;
  size_t stride;
  int slots;
  int next;
  int dev;
  int dev2;
  int blocks;
  int blocks2;
  cudaStream_t stream2;
  cudaEvent_t fork;
  cudaEvent_t join;
};

int cb_copy_enqueue(void* arg, cudaStream_t s) {
  cb_copy_op* o = static_cast<cb_copy_op*>(arg);
  if (o->slots < 1 || o->next < 0 || o->next >= o->slots) return cudaErrorInvalidValue;
  const size_t off = static_cast<size_t>(o->next) * o->stride;
  o->next = (o->next + 1) % o->slots;
  if (!o->bidir) return copy_on(o->engine, o->dst + off, o->src + off, o->bytes, o->blocks, o->dev, s);
  int rc = on_device(o->dev, [&]() -> int { return cudaEventRecord(o->fork, s); });
  if (rc) return rc;
  if ((rc = cudaStreamWaitEvent(o->stream2, o->fork, 0)) != cudaSuccess) return rc;
  if ((rc = copy_on(o->engine, o->dst + off, o->src + off, o->bytes, o->blocks, o->dev, s))) return rc;
  if ((rc = copy_on(o->engine, o->dst2 + off, o->src2 + off, o->bytes, o->blocks2, o->dev2, o->stream2))) return rc;
  rc = on_device(o->dev2, [&]() -> int { return cudaEventRecord(o->join, o->stream2); });
  if (rc) return rc;
  return cudaStreamWaitEvent(s, o->join, 0);
}

// Direction B's stream and the fork/join events of a bidir op; cb_copy_bidir_free releases them.
int cb_copy_bidir_make(cb_copy_op* o) {
  int rc = on_device(o->dev, [&]() -> int { return cudaEventCreateWithFlags(&o->fork, cudaEventDisableTiming); });
  if (rc) return rc;
  return on_device(o->dev2, [&]() -> int {
    cudaError_t err = cudaStreamCreateWithFlags(&o->stream2, cudaStreamNonBlocking);
    if (err != cudaSuccess) return err;
    return cudaEventCreateWithFlags(&o->join, cudaEventDisableTiming);
  });
}

int cb_copy_bidir_free(cb_copy_op* o) {
  int rc = 0;
  if (o->stream2) rc = on_device(o->dev2, [&]() -> int {
    cudaError_t err = cudaStreamSynchronize(o->stream2);
    cudaStreamDestroy(o->stream2);
    return err;
  });
  if (o->join) cudaEventDestroy(o->join);
  if (o->fork) cudaEventDestroy(o->fork);
  o->stream2 = nullptr;
  o->join = o->fork = nullptr;
  return rc;
}

// Pinned host memory every GPU can map (portable, mapped): *host for the CPU, *dev for kernels.
int cb_copy_host_alloc(size_t bytes, void** host, void** dev) {
  cudaError_t err = cudaHostAlloc(host, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err != cudaSuccess) return err;
  err = cudaHostGetDevicePointer(dev, *host, 0);
  if (err != cudaSuccess) {
    cudaFreeHost(*host);
    *host = nullptr;
  }
  return err;
}

int cb_copy_host_free(void* host) { return cudaFreeHost(host); }

// Let `dev` reach `peer`'s memory (an SM copy between GPUs needs it; a copy engine falls back to a
// copy through the host without it). *can: whether the pair supports peer access at all.
int cb_copy_enable_peer(int dev, int peer, int* can) {
  cudaError_t err = cudaDeviceCanAccessPeer(can, dev, peer);
  if (err != cudaSuccess || !*can) return err;
  return on_device(dev, [&]() -> int {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();  // not an error here: clear it
      return cudaSuccess;
    }
    return e;
  });
}

int cb_copy_sm_count(int dev, int* sms) { return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev); }

const char* cb_copy_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // extern "C"
