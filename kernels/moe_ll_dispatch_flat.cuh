// The flat low-latency dispatch (DispatchVariant kDispatchFlat, moe_ll_kernels.cuh): the work is
// the (token, k) choices, not the experts. Same output and signals as the per-expert dispatch:
// rows in [local expert][source][slot] with slots in token order, ll_recv_src, FP8 scales, and one
// tagged count per (local expert, source) released after every row of it has landed.
//
//  1. Every warp of the grid owns units (choice, chunk of the row) and starts its first unit's
//     loads at once (the source row depends on the token alone), up to kFlatVecs 16-byte loads
//     per lane in flight, so their latency hides behind step 2.
//  2. Every block ranks the choices in shared memory: each warp ranks a contiguous segment of
//     the routing with __match_any_sync (no atomics, deterministic), a column scan over the
//     segments gives each choice's slot and each expert's count.
//  3. The warp stores its chunks at their slots (or puts them, where the peer is not mapped).
//  4. One arrival per block (system fence, one atomic); the last block to arrive releases every
//     (expert, source) count. No step is per expert or serial over a block's experts.
#pragma once
#include "moe_common.cuh"

namespace moe {

constexpr int kFlatVecs = 16;         // int4 per lane per unit at most: 8 KiB of a row per warp
constexpr int kFlatMaxSegments = 16;  // routing segments ranked in parallel (one per warp)

// How the rows are cut and the routing ranked; made on the host (flat_plan).
struct FlatPlan {
  int chunks;      // units per row
  int chunk_vecs;  // int4 per unit (the last of a row may be shorter)
  int segments;    // routing segments, one warp each
};

// Shared memory (ints): choice -> expert [T*K], rank inside its segment [T*K], per segment and
// expert the count then its exclusive prefix [segments][E], per expert the total [E].
inline size_t flat_smem_bytes(const Dims& d, int segments) {
  const size_t tk = size_t(d.num_tokens) * d.topk;
  return sizeof(int) * (2 * tk + size_t(segments + 1) * d.num_experts);
}

// Enough units for every warp of the grid when the choices are few, at most kFlatVecs int4 per
// lane; the most segments that fit in 48 KiB. segments == 0: the routing does not fit.
inline FlatPlan flat_plan(const Dims& d, int num_sms, int warps_per_block) {
  const int row_vecs = d.row_bytes / 16, tk = d.num_tokens * d.topk;
  const int warps = num_sms * warps_per_block;
  int chunks = tk > 0 ? warps / tk : 1;
  chunks = chunks < 1 ? 1 : chunks;
  const int most = (row_vecs + 31) / 32;                          // every lane has an int4
  const int least = (row_vecs + 32 * kFlatVecs - 1) / (32 * kFlatVecs);
  chunks = chunks > most ? most : chunks;
  chunks = chunks < least ? least : chunks;
  chunks = chunks < 1 ? 1 : chunks;
  FlatPlan p{chunks, (row_vecs + chunks - 1) / chunks, 0};
  for (int s = kFlatMaxSegments; s >= 1 && !p.segments; --s)
    if (flat_smem_bytes(d, s) <= 48 * 1024) p.segments = s;
  return p;
}

template <int kVecs>
__device__ __forceinline__ void load_vecs(int4 (&v)[kVecs], const int4* src, int n, int lane) {
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
    if (j * 32 + lane < n) v[j] = ld_nc_int4(src + j * 32 + lane);
}

template <int kVecs>
__device__ __forceinline__ void store_vecs(int4* dst, const int4 (&v)[kVecs], int n, int lane) {
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
    if (j * 32 + lane < n) dst[j * 32 + lane] = v[j];
}

// Step 2: s_idx[i] = expert of choice i (-1: not sent), s_rank[i] = its rank among the earlier
// choices of the same expert, s_base[seg][e] = choices of e before segment seg, s_total[e].
__device__ __forceinline__ void flat_rank(const int* topk_idx, int tk, int E, int segments,
                                          int* s_idx, int* s_rank, int* s_base, int* s_total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < tk; i += blockDim.x) {
    const int e = topk_idx[i];
    s_idx[i] = e >= 0 && e < E ? e : -1;
  }
  for (int i = threadIdx.x; i < segments * E; i += blockDim.x) s_base[i] = 0;
  __syncthreads();
  const int seg_len = (tk + segments - 1) / segments;
  if (warp < segments) {
    int* hist = s_base + warp * E;
    const int hi = min(tk, (warp + 1) * seg_len);
    for (int base = warp * seg_len; base < hi; base += 32) {   // warp-uniform
      const int i = base + lane;
      const int e = i < hi ? s_idx[i] : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      const int before = __popc(peers & ((1u << lane) - 1));
      if (e >= 0) s_rank[i] = hist[e] + before;
      __syncwarp();
      if (e >= 0 && before == 0) hist[e] += __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int s = 0; s < segments; ++s) {
      const int n = s_base[s * E + e];
      s_base[s * E + e] = run;
      run += n;
    }
    s_total[e] = run;
  }
  __syncthreads();
}

// One unit of step 3: choice i, chunk c of its row. `peer` is the destination's workspace where
// this GPU can store to it (mapped(pe, 0): one mapping, so + offset), else null and the transport
// puts. `loaded`: v (and sv, FP8 scales of chunk 0) already hold the chunk. True if it put.
// kMapped: the launcher found every peer mapped, so no transport call is compiled in (a call
// makes the compiler keep fewer registers: with NVSHMEM it spilled the loaded chunk).
template <class Transport, bool kMapped>
__device__ __forceinline__ bool flat_send(const Transport& tr, const Dims& d, const Layout& lay,
                                          const FlatPlan& plan, int i, int c, int e, int slot,
                                          uint8_t* peer, bool loaded, bool scale_vec,
                                          int4 (&v)[kFlatVecs], int4& sv, const uint8_t* x,
                                          const float* scales, int lane) {
  const int pe = e / d.local_experts, l = e % d.local_experts, scale_bytes = d.num_scales * 4;
  const long long t = i / d.topk;
  const long long row = ((long long)l * d.num_ranks + d.rank) * d.max_tokens + slot;
  const int v0 = c * plan.chunk_vecs, n = min(plan.chunk_vecs, d.row_bytes / 16 - v0);
  const long long off = lay.ll_recv_x + row * d.row_bytes + v0 * 16LL;
  const long long s_off = lay.ll_recv_scales + row * scale_bytes;
  const int4* src = reinterpret_cast<const int4*>(x + t * d.row_bytes) + v0;
  const float* s_src = scales + t * d.num_scales;
  const bool vec_scales = c == 0 && scale_vec && lane < scale_bytes / 16;
  bool put = false;
  if (peer) {
    if (!loaded) {
      load_vecs<kFlatVecs>(v, src, n, lane);
      if (vec_scales) sv = ld_nc_int4(reinterpret_cast<const int4*>(s_src) + lane);
    }
    store_vecs<kFlatVecs>(reinterpret_cast<int4*>(peer + off), v, n, lane);
    if (vec_scales) reinterpret_cast<int4*>(peer + s_off)[lane] = sv;
    if (c == 0) {
      if (scale_bytes && !scale_vec) warp_copy(peer + s_off, s_src, scale_bytes, lane);
      if (lane == 0) *reinterpret_cast<int*>(peer + lay.ll_recv_src + row * 4) = i;
    }
  } else if constexpr (!kMapped) {
    tr.put_warp(pe, off, src, n * 16, lane);
    if (c == 0) {
      if (scale_bytes) tr.put_warp(pe, s_off, s_src, scale_bytes, lane);
      if (lane == 0) tr.put_int(pe, lay.ll_recv_src + row * 4, i);
    }
    put = true;
  }
  return put;
}

// Steps 1-4 (the wait for the incoming counts is the caller's). `arrived` counts the blocks
// that have sent; the last one resets it. !kRelease: steps 1-3 only (a timing breakdown).
template <class Transport, bool kRelease, bool kMapped>
__device__ void dispatch_flat(const Transport& tr, const Dims& d, const Layout& lay,
                              const FlatPlan& plan, const int* topk_idx, const uint8_t* x,
                              const float* scales, uint32_t epoch, uint32_t* arrived, int* smem) {
  const int K = d.topk, E = d.num_experts, L = d.local_experts, R = d.num_ranks;
  const int tk = d.num_tokens * K;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int gw = warp * gridDim.x + blockIdx.x;   // consecutive units on different SMs
  const int units = tk * plan.chunks;
  const int scale_bytes = d.num_scales * 4;
  // FP8 scales ride with chunk 0 as one int4 per lane where they fit
  const bool scale_vec = scale_bytes > 0 && scale_bytes % 16 == 0 && scale_bytes <= 32 * 16 &&
                         (reinterpret_cast<uintptr_t>(scales) & 15) == 0;
  int* s_idx = smem;
  int* s_rank = s_idx + tk;
  int* s_base = s_rank + tk;
  int* s_total = s_base + plan.segments * E;

  // 1. the first unit's loads, before the ranking. The source depends on the token alone: with
  //    every peer mapped they go out first (a choice not sent wastes one read); otherwise after
  //    the transport said the destination is mapped (every call into it before them).
  int4 v[kFlatVecs];
  int4 sv = make_int4(0, 0, 0, 0);
  uint8_t* first_peer = nullptr;
  if (gw < units) {
    const int i = gw / plan.chunks, c = gw % plan.chunks;
    int e = -1;
    if constexpr (!kMapped) {
      e = topk_idx[i];
      if (e >= 0 && e < E) first_peer = static_cast<uint8_t*>(tr.mapped(e / L, 0));
    }
    if (kMapped || first_peer) {
      const int v0 = c * plan.chunk_vecs, n = min(plan.chunk_vecs, d.row_bytes / 16 - v0);
      const long long t = i / K;
      load_vecs<kFlatVecs>(v, reinterpret_cast<const int4*>(x + t * d.row_bytes) + v0, n, lane);
      if (c == 0 && scale_vec && lane < scale_bytes / 16)
        sv = ld_nc_int4(reinterpret_cast<const int4*>(scales + t * d.num_scales) + lane);
    }
    if constexpr (kMapped) {
      e = topk_idx[i];
      if (e >= 0 && e < E) first_peer = static_cast<uint8_t*>(tr.mapped(e / L, 0));
    }
  }

  // 2. slots
  flat_rank(topk_idx, tk, E, plan.segments, s_idx, s_rank, s_base, s_total);
  const int seg_len = (tk + plan.segments - 1) / plan.segments;

  // 3. rows: the first unit from its registers (peeled, so no transport call sits between its
  //    loads and its stores), then the others; every branch is warp-uniform
  bool remote = false;
  int4 sw = make_int4(0, 0, 0, 0);
  if (gw < units) {
    const int i = gw / plan.chunks, e = s_idx[i];
    const int slot = e < 0 ? 0 : s_base[(i / seg_len) * E + e] + s_rank[i];
    if (e >= 0 && slot < d.max_tokens)   // a slot past the budget: a token chose one expert twice
      remote |= flat_send<Transport, kMapped>(tr, d, lay, plan, i, gw % plan.chunks, e, slot, first_peer, true,
                          scale_vec, v, sv, x, scales, lane);
  }
  for (int u = gw + warps; u < units; u += warps) {
    const int i = u / plan.chunks, e = s_idx[i];
    const int slot = e < 0 ? 0 : s_base[(i / seg_len) * E + e] + s_rank[i];
    if (e < 0 || slot >= d.max_tokens) continue;
    remote |= flat_send<Transport, kMapped>(tr, d, lay, plan, i, u % plan.chunks, e, slot,
                        static_cast<uint8_t*>(tr.mapped(e / L, 0)), false, scale_vec, v, sw, x,
                        scales, lane);
  }

  // 4. one arrival per block; the last releases every count
  if (!kRelease) return;
  if constexpr (!kMapped)
    if (remote) tr.warp_flush(lane);
  __shared__ int s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();   // this block's rows (ordered before by the barrier) are visible
    const bool last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    if (last) {
      *arrived = 0;           // no block of this launch touches it again
      __threadfence_system();
    }
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  // Thread 0's fence, after it saw every block arrive, is ordered before these stores by the
  // barrier: a count this GPU can store to needs only the release store (no fence per thread).
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const long long off = lay.ll_cnt_in + ((e % L) * R + d.rank) * 8;
    const uint64_t value = tag(epoch, min(s_total[e], d.max_tokens));
    uint64_t* direct = static_cast<uint64_t*>(tr.mapped(e / L, off));
    if (kMapped || direct)
      st_release_u64(direct, value);
    else if constexpr (!kMapped)
      tr.signal_set(e / L, off, value);
  }
}

}  // namespace moe
