// MoE dispatch/combine, low-latency mode, written once for any transport:
// batched layout [local_experts, ranks * max_tokens, hidden] plus
// per-(expert, source) counts, one message per (token, expert) selection,
// each count released by a signal after its rows.
//
// A Transport provides (all offsets are workspace byte offsets, identical on
// every rank):
//   uint64_t local()                                 this rank's workspace base
//   void* mapped(pe, off)                            a pointer this GPU can store through, or null
//   bool all_mapped(npes)      (host)                mapped() is a pointer for every peer
//   put_warp(pe, off, src, bytes, lane)              warp-wide put of `bytes` (multiple of 4)
//   put_int(pe, off, value)                          one int, from one thread
//   warp_flush(lane)                                 the warp's puts are complete at the target
//   signal_set(pe, off, u64) / signal_add(pe, off, u64)   ordered after the block's puts
// moe_ll.cu instantiates it over CUDA IPC peer pointers, moe_ll_nvshmem.cu over NVSHMEM.
// The combine is in moe_ll_combine.cuh.
//
// Epochs live on the device (EpochCounter), so both kernels can be captured
// into a CUDA graph and replayed with a fixed token budget (max_tokens).
#pragma once
#include "moe_common.cuh"
#include "moe_ll_dispatch_flat.cuh"

namespace moe {

constexpr int kLLWarps = 16;

// One warp copies `n` int4 with kUnroll loads per lane in flight before their stores: a row
// costs a few memory round trips instead of one per 512 bytes.
template <int kUnroll>
__device__ __forceinline__ void warp_copy_unrolled(int4* dst, const int4* src, int n, int lane) {
  for (int base = 0; base < n; base += 32 * kUnroll) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      if (i < n) v[u] = ld_nc_int4(src + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      if (i < n) dst[i] = v[u];
    }
  }
}

// A row of `bytes` (a multiple of 16, 16-byte aligned source): stores straight into a
// destination this GPU can write (peer pointer, or a peer NVSHMEM maps) with the unrolled copy,
// else the transport's warp put (RDMA).
template <class Transport, int kUnroll>
__device__ __forceinline__ void put_row(const Transport& tr, int pe, long long off,
                                        const void* src, int bytes, int lane) {
  if (int4* dst = static_cast<int4*>(tr.mapped(pe, off)))
    warp_copy_unrolled<kUnroll>(dst, static_cast<const int4*>(src), bytes / 16, lane);
  else
    tr.put_warp(pe, off, src, bytes, lane);
}

// kDispatchPlain: the per-expert organisation below; staging its routing measured slower on one
// H200 (deepseek-v3 decode, BF16: 25.2 against 21.1 us).
// kDispatchFlat (the default, peer.py names it first; moe_ll_dispatch_flat.cuh): one flat list of
// (token, k) choices over every warp of the grid, ranked in shared memory, one release per
// (expert, source) after the last block; measured 0.55-0.76x plain's time at deepseek-v3 decode,
// but slower on NVSHMEM at two shapes before its no-call instantiation (docs/measurements/2026-12-03-h200x1-moe-ll-dispatch.md).
enum DispatchVariant { kDispatchStaged = 0, kDispatchPlain = 1, kDispatchFlat = 2,
                       // timing breakdown only, nothing is released: the flat rows alone
                       kDispatchFlatSendOnly = 3 };

// Per-expert dispatch (kDispatchPlain, kDispatchStaged): each block owns experts; warp 0 lists the
// tokens that chose the expert (in token order, so the layout is deterministic), all warps push the
// rows, thread 0 releases the count. kStaged: the block first copies the routing (tokens x topk
// ints) into shared memory, so the per-expert scan reads no global memory, and rows go with the
// unrolled copy; otherwise both read global memory.
template <class Transport, bool kStaged>
__device__ void dispatch_per_expert(const Transport& tr, const Dims& d, const Layout& lay,
                                    const int* topk_idx, const uint8_t* x, const float* scales,
                                    uint32_t epoch, int* s_list) {
  __shared__ int s_count;
  const int R = d.num_ranks, L = d.local_experts, K = d.topk, T = d.num_tokens;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int* idx = topk_idx;
  if (kStaged) {
    int* s_topk = s_list + d.max_tokens;
    for (int i = threadIdx.x; i < T * K; i += blockDim.x) s_topk[i] = topk_idx[i];
    __syncthreads();
    idx = s_topk;
  }

  for (int e = blockIdx.x; e < d.num_experts; e += gridDim.x) {
    const int dst = e / L, l = e % L;
    if (warp == 0) {
      int n = 0;
      for (int base = 0; base < T; base += 32) {
        const int t = base + lane;
        int kk = -1;
        if (t < T)
          for (int k = 0; k < K; ++k)
            if (idx[t * K + k] == e) { kk = k; break; }
        const unsigned mask = __ballot_sync(0xffffffffu, kk >= 0);
        if (kk >= 0) s_list[n + __popc(mask & ((1u << lane) - 1))] = t * K + kk;
        n += __popc(mask);
      }
      if (lane == 0) s_count = n;
    }
    __syncthreads();
    const int n = s_count;
    const long long slot0 = ((long long)l * R + d.rank) * d.max_tokens;
    for (int i = warp; i < n; i += kLLWarps) {
      const int tk = s_list[i], t = tk / K;
      const long long off = lay.ll_recv_x + (slot0 + i) * d.row_bytes;
      if (kStaged)
        put_row<Transport, 8>(tr, dst, off, x + (long long)t * d.row_bytes, d.row_bytes, lane);
      else
        tr.put_warp(dst, off, x + (long long)t * d.row_bytes, d.row_bytes, lane);
      if (d.num_scales)
        tr.put_warp(dst, lay.ll_recv_scales + (slot0 + i) * d.num_scales * 4,
                    scales + (long long)t * d.num_scales, d.num_scales * 4, lane);
      if (lane == 0) tr.put_int(dst, lay.ll_recv_src + (slot0 + i) * 4, tk);
    }
    tr.warp_flush(lane);
    __syncthreads();
    if (threadIdx.x == 0) tr.signal_set(dst, lay.ll_cnt_in + (l * R + d.rank) * 8, tag(epoch, n));
  }
}

// Dispatch, any variant; then wait for every incoming count.
// kMapped (flat variants only): every peer is mapped (Transport::all_mapped on the host).
template <class Transport, int kVariant, bool kMapped = false>
__global__ void __launch_bounds__(kLLWarps * 32)
ll_dispatch(Transport tr, Dims d, Layout lay, FlatPlan plan, const int* topk_idx, const uint8_t* x,
            const float* scales, EpochCounter* epochs, int* err) {
  const uint32_t epoch = epoch_begin(epochs);
  extern __shared__ int smem[];
  if constexpr (kVariant == kDispatchFlatSendOnly) {
    dispatch_flat<Transport, false, kMapped>(tr, d, lay, plan, topk_idx, x, scales, epoch,
                                             &epochs->arrived, smem);
    epoch_end(epochs, epoch);
    return;
  }
  if constexpr (kVariant == kDispatchFlat)
    dispatch_flat<Transport, true, kMapped>(tr, d, lay, plan, topk_idx, x, scales, epoch,
                                            &epochs->arrived, smem);
  else
    dispatch_per_expert<Transport, kVariant == kDispatchStaged>(tr, d, lay, topk_idx, x, scales,
                                                                epoch, smem);
  const uint64_t self = tr.local();
  const int LR = d.local_experts * d.num_ranks;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < LR; i += gridDim.x * blockDim.x)
    at<int>(self, lay.ll_recv_count)[i] =
        wait_tagged(at<uint64_t>(self, lay.ll_cnt_in) + i, epoch, err);
  epoch_end(epochs, epoch);
}

// Host-side launcher of the dispatch, shared by both transports (returns a cudaError_t as int);
// the combine's is in moe_ll_combine.cuh. The flat variant falls back to the plain one where its
// routing does not fit in shared memory.
template <class Transport>
int launch_ll_dispatch(Transport tr, const int* dims, const long long* offs, const int* topk_idx,
                       const void* x, const float* scales, void* epochs, int num_sms, int variant,
                       int* err, cudaStream_t stream) {
  Dims d = dims_from(dims);
  const size_t plain = sizeof(int) * d.max_tokens;
  const size_t staged = plain + sizeof(int) * d.num_tokens * d.topk;
  if (d.num_tokens > d.max_tokens || plain > 48 * 1024 || d.row_bytes % 16 ||
      variant < kDispatchStaged || variant > kDispatchFlatSendOnly)
    return int(cudaErrorInvalidValue);
  const Layout lay = layout_from(offs);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  EpochCounter* ep = static_cast<EpochCounter*>(epochs);
  const FlatPlan plan = flat_plan(d, num_sms, kLLWarps);
  const dim3 grid(num_sms), block(kLLWarps * 32);
  const size_t flat = flat_smem_bytes(d, plan.segments);
  const bool mapped = (variant == kDispatchFlat || variant == kDispatchFlatSendOnly) &&
                      tr.all_mapped(d.num_ranks);
  if (variant == kDispatchFlat && plan.segments && mapped)
    ll_dispatch<Transport, kDispatchFlat, true><<<grid, block, flat, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  else if (variant == kDispatchFlat && plan.segments)
    ll_dispatch<Transport, kDispatchFlat><<<grid, block, flat, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  else if (variant == kDispatchFlatSendOnly && plan.segments && mapped)
    ll_dispatch<Transport, kDispatchFlatSendOnly, true><<<grid, block, flat, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  else if (variant == kDispatchFlatSendOnly && plan.segments)
    ll_dispatch<Transport, kDispatchFlatSendOnly><<<grid, block, flat, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  else if (variant == kDispatchStaged && staged <= 48 * 1024)
    ll_dispatch<Transport, kDispatchStaged><<<grid, block, staged, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  else
    ll_dispatch<Transport, kDispatchPlain><<<grid, block, plain, stream>>>(
        tr, d, lay, plan, topk_idx, xb, scales, ep, err);
  return int(cudaGetLastError());
}

}  // namespace moe
