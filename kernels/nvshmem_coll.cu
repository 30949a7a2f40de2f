// NVSHMEM collectives on NVSHMEM_TEAM_WORLD: host-initiated on a stream, and
// device-initiated from one CTA launched with nvshmemx_collective_launch (the
// launch NVSHMEM requires so that every PE's CTAs are co-resident).
//
// dtype codes: 0 float32, 1 bfloat16, 2 float16, 3 int32. op codes: 0 all_reduce
// (sum), 1 all_gather (fcollect), 2 alltoall, 3 broadcast (root 0),
// 4 reduce_scatter (sum). `count` is NVSHMEM's own element count per call.
#include "nvshmem_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

enum CollOp { OP_ALL_REDUCE = 0, OP_ALL_GATHER = 1, OP_ALLTOALL = 2, OP_BROADCAST = 3, OP_REDUCE_SCATTER = 4 };

__host__ __device__ inline size_t elem_bytes(int dtype) { return dtype == 1 || dtype == 2 ? 2 : 4; }

#define CB_REDUCE_HOST(NAME, T)                                                                     \
    (op == OP_ALL_REDUCE                                                                            \
         ? nvshmemx_##NAME##_sum_reduce_on_stream(team, (T *)dst, (const T *)src, count, s)        \
         : nvshmemx_##NAME##_sum_reducescatter_on_stream(team, (T *)dst, (const T *)src, count, s))

static int host_reduce(int op, int dtype, void *dst, const void *src, size_t count, cudaStream_t s) {
    nvshmem_team_t team = NVSHMEM_TEAM_WORLD;
    switch (dtype) {
        case 0: return CB_REDUCE_HOST(float, float);
        case 1: return CB_REDUCE_HOST(bfloat16, __nv_bfloat16);
        case 2: return CB_REDUCE_HOST(half, half);
        case 3: return CB_REDUCE_HOST(int, int);
    }
    return -1;
}

#define CB_REDUCE_DEV(NAME, T)                                                                  \
    (op == OP_ALL_REDUCE                                                                        \
         ? nvshmemx_##NAME##_sum_reduce_block(NVSHMEM_TEAM_WORLD, (T *)dst, (const T *)src, count) \
         : nvshmemx_##NAME##_sum_reducescatter_block(NVSHMEM_TEAM_WORLD, (T *)dst, (const T *)src, count))

__global__ void __launch_bounds__(256) k_coll(int op, int dtype, void *dst, const void *src, size_t count) {
    const size_t bytes = count * elem_bytes(dtype);
    switch (op) {
        case OP_ALL_GATHER: nvshmemx_fcollectmem_block(NVSHMEM_TEAM_WORLD, dst, src, bytes); return;
        case OP_ALLTOALL: nvshmemx_alltoallmem_block(NVSHMEM_TEAM_WORLD, dst, src, bytes); return;
        case OP_BROADCAST:
            nvshmemx_char_broadcast_block(NVSHMEM_TEAM_WORLD, (char *)dst, (const char *)src, bytes, 0);
            return;
    }
    switch (dtype) {
        case 0: CB_REDUCE_DEV(float, float); return;
        case 1: CB_REDUCE_DEV(bfloat16, __nv_bfloat16); return;
        case 2: CB_REDUCE_DEV(half, half); return;
        case 3: CB_REDUCE_DEV(int, int); return;
    }
}

extern "C" {

int cb_coll_attach(int device) { return commbench_nvshmem_attach(device); }

int cb_coll_host(int op, int dtype, void *dst, const void *src, size_t count, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype < 0 || dtype > 3) return -1;
    const size_t bytes = count * elem_bytes(dtype);
    nvshmem_team_t team = NVSHMEM_TEAM_WORLD;
    switch (op) {
        case OP_ALL_REDUCE:
        case OP_REDUCE_SCATTER: return host_reduce(op, dtype, dst, src, count, s);
        case OP_ALL_GATHER: return nvshmemx_fcollectmem_on_stream(team, dst, src, bytes, s);
        case OP_ALLTOALL: return nvshmemx_alltoallmem_on_stream(team, dst, src, bytes, s);
        case OP_BROADCAST: return nvshmemx_broadcastmem_on_stream(team, dst, src, bytes, 0, s);
    }
    return -1;
}

int cb_coll_device(int op, int dtype, void *dst, const void *src, size_t count, int threads,
                   void *stream) {
    if (dtype < 0 || dtype > 3 || op < 0 || op > 4) return -1;
    void *args[] = {&op, &dtype, &dst, (void *)&src, &count};
    // NVSHMEM refuses a collective launch whose CTAs cannot all be resident
    // ("One or more PEs cannot launch") without always returning an error: check first.
    int max_grid = 0;
    int rc = nvshmemx_collective_launch_query_gridsize((const void *)k_coll, dim3(threads), args, 0, &max_grid);
    if (rc != 0 || max_grid < 1) return rc != 0 ? rc : -2;
    rc = nvshmemx_collective_launch((const void *)k_coll, dim3(1), dim3(threads), args, 0,
                                    (cudaStream_t)stream);
    return rc != 0 ? rc : (int)cudaGetLastError();
}

}  // extern "C"
