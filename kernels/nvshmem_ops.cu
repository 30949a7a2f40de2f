// NVSHMEM point-to-point and collective operations for the nvshmem family.
//
// Device-initiated ops are kernels calling the NVSHMEM device API; host-
// initiated ops are the on-stream host API. Every launcher takes the stream
// the runner times on. The library attaches to the NVSHMEM instance that
// commbench/comm/nvshmem.py initialised (see nvshmem_common.cuh).
#include "nvshmem_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

enum Scope { SCOPE_THREAD = 0, SCOPE_WARP = 1, SCOPE_BLOCK = 2 };

// Which byte range [begin, end) a thread/warp/block owns when `bytes` are split
// over all issuing units of the grid; 16-byte aligned chunks keep transfers vectorised.
struct Chunk {
    size_t begin, end;
    bool leader;
};

__device__ __forceinline__ Chunk my_chunk(size_t bytes, int scope) {
    size_t units, unit;
    bool leader;
    if (scope == SCOPE_BLOCK) {
        units = gridDim.x;
        unit = blockIdx.x;
        leader = threadIdx.x == 0;
    } else if (scope == SCOPE_WARP) {
        const size_t warps = blockDim.x / 32;
        units = gridDim.x * warps;
        unit = blockIdx.x * warps + threadIdx.x / 32;
        leader = (threadIdx.x % 32) == 0;
    } else {
        units = (size_t)gridDim.x * blockDim.x;
        unit = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        leader = true;
    }
    size_t chunk = (bytes + units - 1) / units;
    chunk = (chunk + 15) / 16 * 16;
    Chunk c;
    c.begin = unit * chunk < bytes ? unit * chunk : bytes;
    c.end = c.begin + chunk < bytes ? c.begin + chunk : bytes;
    c.leader = leader;
    return c;
}

__device__ __forceinline__ void rma(char *dst, const char *src, size_t n, int pe, int scope,
                                    bool nbi, bool is_get) {
    if (n == 0) return;
    if (is_get) {
        if (scope == SCOPE_BLOCK) {
            nbi ? nvshmemx_getmem_nbi_block(dst, src, n, pe) : nvshmemx_getmem_block(dst, src, n, pe);
        } else if (scope == SCOPE_WARP) {
            nbi ? nvshmemx_getmem_nbi_warp(dst, src, n, pe) : nvshmemx_getmem_warp(dst, src, n, pe);
        } else {
            nbi ? nvshmem_getmem_nbi(dst, src, n, pe) : nvshmem_getmem(dst, src, n, pe);
        }
    } else {
        if (scope == SCOPE_BLOCK) {
            nbi ? nvshmemx_putmem_nbi_block(dst, src, n, pe) : nvshmemx_putmem_block(dst, src, n, pe);
        } else if (scope == SCOPE_WARP) {
            nbi ? nvshmemx_putmem_nbi_warp(dst, src, n, pe) : nvshmemx_putmem_warp(dst, src, n, pe);
        } else {
            nbi ? nvshmem_putmem_nbi(dst, src, n, pe) : nvshmem_putmem(dst, src, n, pe);
        }
    }
}

// put/get bandwidth: every unit moves its chunk `reps` times, then the PE quiets.
__global__ void k_rma_bw(char *dst, const char *src, size_t bytes, int pe, int scope, int nbi,
                         int is_get, int reps) {
    // A chunk is the same for every thread of its warp/block, so skipping an
    // empty one never splits a warp- or block-scoped call.
    Chunk c = my_chunk(bytes, scope);
    for (int r = 0; r < reps; ++r)
        rma(dst + c.begin, src + c.begin, c.end - c.begin, pe, scope, nbi != 0, is_get != 0);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

// Scalar puts: one nvshmem_uint32_p per 4-byte word (message-rate style traffic).
__global__ void k_p(uint32_t *dst, const uint32_t *src, size_t words, int pe, int reps) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
            nvshmem_uint32_p(dst + i, src[i], pe);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

// One fetch-add per 8-byte word on the peer; the fetched old values land in `fetched`.
__global__ void k_fetch_add(uint64_t *target, uint64_t *fetched, size_t words, uint64_t inc, int pe) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
        fetched[i] = nvshmem_uint64_atomic_fetch_add(target + i, inc, pe);
}

// put-with-signal: each block sends its chunk and adds 1 to the peer's signal;
// a receiving PE waits until its own signal reached `expect` (bounded wait).
__global__ void k_put_signal(char *dst, const char *src, size_t bytes, uint64_t *sig, int pe,
                             int send, uint64_t expect, uint64_t timeout_ns, int *err) {
    // Only blocks that own bytes send (and signal), so the receiver expects
    // ceil(bytes / chunk) signals per launch, the same count the host computes.
    Chunk c = my_chunk(bytes, SCOPE_BLOCK);
    if (send && c.end > c.begin)
        nvshmemx_putmem_signal_nbi_block(dst + c.begin, src + c.begin, c.end - c.begin, sig, 1,
                                         NVSHMEM_SIGNAL_ADD, pe);
    if (expect && blockIdx.x == 0 && threadIdx.x == 0) cb_wait_signal_ge(sig, expect, timeout_ns, err);
}

// Latency loop in one CTA: put (or get) + quiet per iteration, time stamped with
// the global timer. stamps[i] is the end of iteration i-1 (stamps[0] the start).
__global__ void k_latency(char *dst, const char *src, size_t bytes, int pe, int is_get, int iters,
                          uint64_t *stamps) {
    if (threadIdx.x == 0) stamps[0] = cb_globaltimer_ns();
    for (int i = 0; i < iters; ++i) {
        if (is_get) nvshmemx_getmem_block(dst, src, bytes, pe);
        else nvshmemx_putmem_block(dst, src, bytes, pe);
        if (threadIdx.x == 0) nvshmem_quiet();
        __syncthreads();
        if (threadIdx.x == 0) stamps[i + 1] = cb_globaltimer_ns();
    }
}

// Ping-pong: the initiator sends and waits for the echo; the responder waits and
// echoes. Signals carry base+i+1 so repeated calls never see a stale value.
__global__ void k_pingpong(char *dst, const char *src, size_t bytes, uint64_t *sig, int pe,
                           int initiator, int iters, uint64_t base, uint64_t *stamps,
                           uint64_t timeout_ns, int *err) {
    __shared__ int failed;
    if (threadIdx.x == 0) { stamps[0] = cb_globaltimer_ns(); failed = 0; }
    __syncthreads();
    for (int i = 0; i < iters && !failed; ++i) {
        const uint64_t v = base + i + 1;
        if (!initiator && threadIdx.x == 0 && !cb_wait_signal_ge(sig, v, timeout_ns, err)) failed = 1;
        __syncthreads();
        if (failed) break;
        nvshmemx_putmem_signal_block(dst, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, pe);
        if (initiator && threadIdx.x == 0 && !cb_wait_signal_ge(sig, v, timeout_ns, err)) failed = 1;
        __syncthreads();
        if (threadIdx.x == 0) stamps[i + 1] = cb_globaltimer_ns();
    }
}

#define CB_LAUNCH_ERR() ((int)cudaGetLastError())

extern "C" {

int cb_ops_attach(int device) { return commbench_nvshmem_attach(device); }

int cb_rma_bw(void *dst, const void *src, size_t bytes, int pe, int scope, int nbi, int is_get,
              int reps, int num_ctas, int threads, void *stream) {
    k_rma_bw<<<num_ctas, threads, 0, (cudaStream_t)stream>>>((char *)dst, (const char *)src, bytes,
                                                            pe, scope, nbi, is_get, reps);
    return CB_LAUNCH_ERR();
}

int cb_p(void *dst, const void *src, size_t words, int pe, int reps, int num_ctas, int threads,
         void *stream) {
    k_p<<<num_ctas, threads, 0, (cudaStream_t)stream>>>((uint32_t *)dst, (const uint32_t *)src,
                                                       words, pe, reps);
    return CB_LAUNCH_ERR();
}

int cb_fetch_add(void *target, void *fetched, size_t words, uint64_t inc, int pe, int num_ctas,
                 int threads, void *stream) {
    k_fetch_add<<<num_ctas, threads, 0, (cudaStream_t)stream>>>((uint64_t *)target,
                                                               (uint64_t *)fetched, words, inc, pe);
    return CB_LAUNCH_ERR();
}

int cb_put_signal(void *dst, const void *src, size_t bytes, void *sig, int pe, int send,
                  uint64_t expect, uint64_t timeout_ns, void *err, int num_ctas, int threads,
                  void *stream) {
    k_put_signal<<<num_ctas, threads, 0, (cudaStream_t)stream>>>(
        (char *)dst, (const char *)src, bytes, (uint64_t *)sig, pe, send, expect, timeout_ns,
        (int *)err);
    return CB_LAUNCH_ERR();
}

int cb_latency(void *dst, const void *src, size_t bytes, int pe, int is_get, int iters,
               void *stamps, int threads, void *stream) {
    k_latency<<<1, threads, 0, (cudaStream_t)stream>>>((char *)dst, (const char *)src, bytes, pe,
                                                      is_get, iters, (uint64_t *)stamps);
    return CB_LAUNCH_ERR();
}

int cb_pingpong(void *dst, const void *src, size_t bytes, void *sig, int pe, int initiator,
                int iters, uint64_t base, void *stamps, uint64_t timeout_ns, void *err,
                int threads, void *stream) {
    k_pingpong<<<1, threads, 0, (cudaStream_t)stream>>>(
        (char *)dst, (const char *)src, bytes, (uint64_t *)sig, pe, initiator, iters, base,
        (uint64_t *)stamps, timeout_ns, (int *)err);
    return CB_LAUNCH_ERR();
}

// ---- host-initiated, on a stream ----

int cb_host_rma(void *dst, const void *src, size_t bytes, int pe, int nbi, int is_get,
                void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (is_get) {
        nbi ? nvshmemx_getmem_nbi_on_stream(dst, src, bytes, pe, s)
            : nvshmemx_getmem_on_stream(dst, src, bytes, pe, s);
    } else {
        nbi ? nvshmemx_putmem_nbi_on_stream(dst, src, bytes, pe, s)
            : nvshmemx_putmem_on_stream(dst, src, bytes, pe, s);
    }
    nvshmemx_quiet_on_stream(s);
    return CB_LAUNCH_ERR();
}

int cb_host_p(void *dst, const uint32_t *values_host, size_t words, int pe, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    for (size_t i = 0; i < words; ++i) nvshmemx_uint32_p_on_stream((uint32_t *)dst + i, values_host[i], pe, s);
    nvshmemx_quiet_on_stream(s);
    return CB_LAUNCH_ERR();
}

// One enqueued op as the native timed loop (timed_loop.cu) calls it; mirrored by
// families/nvshmem/native.py. put_signal is not here: its expected signal value grows per launch.
enum cb_shmem_kind { CB_SHMEM_NONE = 0, CB_SHMEM_HOST_RMA, CB_SHMEM_HOST_P, CB_SHMEM_RMA_BW, CB_SHMEM_P,
                     CB_SHMEM_FETCH_ADD };

struct cb_shmem_op {
  int kind;
  int pe;
  void *dst;
  const void *src;
  size_t bytes;     // RMA bytes, or words for p / fetch_add
  int nbi;
  int is_get;
  int scope;
  int reps;
  int num_ctas;
  int threads;
  uint64_t inc;
  const uint32_t *values_host;
};

int cb_host_rma(void *dst, const void *src, size_t bytes, int pe, int nbi, int is_get, void *stream);
int cb_host_p(void *dst, const uint32_t *values_host, size_t words, int pe, void *stream);

int cb_shmem_enqueue(void *arg, cudaStream_t s) {
    const cb_shmem_op *o = static_cast<const cb_shmem_op *>(arg);
    switch (o->kind) {
        case CB_SHMEM_NONE: return 0;  // the passive PE of a one-sided test issues nothing
        case CB_SHMEM_HOST_RMA: return cb_host_rma(o->dst, o->src, o->bytes, o->pe, o->nbi, o->is_get, s);
        case CB_SHMEM_HOST_P: return cb_host_p(o->dst, o->values_host, o->bytes, o->pe, s);
        case CB_SHMEM_RMA_BW:
            return cb_rma_bw(o->dst, o->src, o->bytes, o->pe, o->scope, o->nbi, o->is_get, o->reps, o->num_ctas,
                             o->threads, s);
        case CB_SHMEM_P: return cb_p(o->dst, o->src, o->bytes, o->pe, o->reps, o->num_ctas, o->threads, s);
        case CB_SHMEM_FETCH_ADD:
            return cb_fetch_add(o->dst, const_cast<void *>(o->src), o->bytes, o->inc, o->pe, o->num_ctas,
                                o->threads, s);
        default: return (int)cudaErrorInvalidValue;
    }
}

int cb_host_put_signal(void *dst, const void *src, size_t bytes, void *sig, int pe, int send,
                       uint64_t expect, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (send) nvshmemx_putmem_signal_nbi_on_stream(dst, src, bytes, (uint64_t *)sig, 1, NVSHMEM_SIGNAL_ADD, pe, s);
    if (expect) nvshmemx_signal_wait_until_on_stream((uint64_t *)sig, NVSHMEM_CMP_GE, expect, s);
    nvshmemx_quiet_on_stream(s);
    return CB_LAUNCH_ERR();
}

}  // extern "C"
