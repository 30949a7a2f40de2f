// MoE low-latency combine, written once for any transport (see moe_ll_kernels.cuh for the
// Transport interface). The expert outputs wait in the batched layout
// ll_y[local expert][source rank][slot]; each row goes back to its token's slot
// ll_comb_buf[token][k] at the source, which sums out[t] = sum_k w[t,k] * row[t,k].
//
// Two organisations, selected per launch (variant):
//  - kCombineRows (default): the work is the rows actually received. Every warp of the grid
//    takes rows of a flat list (a prefix sum over the per-(expert, source) counts, made in
//    shared memory by every block), copies each with eight 16-byte loads per lane in flight,
//    and releases one flag per returned row, ll_comb_flag[token][k] = epoch (st.release.sys
//    after the warp's barrier where this GPU can store to the flag; kCombineRowsFenced uses
//    the transport's fence and signal instead). The receive side splits every token into
//    chunks of 512 channels, one warp per (token, chunk): the warp waits for the token's
//    top-k flags and reduces its chunk. Cost: proportional to tokens x top-k x hidden, spread
//    over every warp, no per-expert step.
//  - kCombinePerExpert: the earlier organisation, kept for comparison: one block per
//    (expert, source) in turn, a count per expert, one warp per token for the reduction.
//    Its time grows with the experts per block and with the latency of a warp's row copy.
#pragma once
#include "moe_ll_kernels.cuh"   // kLLWarps, the Transport interface

namespace moe {

enum CombineVariant { kCombineRows = 0, kCombinePerExpert = 1, kCombineRowsFenced = 2,
                      // timing breakdown only, the output is incomplete: the send half alone,
                      // the reduction alone (no waits, over whatever the buffers hold)
                      kCombineSendOnly = 3, kCombineReduceOnly = 4 };
constexpr int kSendUnroll = 8;   // int4 loads per lane in flight when sending a row
constexpr int kReduceVecs = 2;   // int4 per lane per summing warp: 512 channels
enum CombinePhases { kSendAndReduce = 0, kSendOnly = 1, kReduceOnly = 2 };

// Flat send: the rows of every (local expert, source) segment, numbered through a prefix sum
// of the counts; warp w of the grid takes rows w, w + warps, ... (blocks interleaved, so
// consecutive rows land on different SMs). kRelease: a flag this GPU can store to is released
// with one st.release.sys after the warp's barrier (its stores are ordered before it), without
// the transport's full fence.
template <class Transport, bool kRelease>
__device__ void combine_send_rows(const Transport& tr, const Dims& d, const Layout& lay,
                                  uint32_t epoch, int* s_prefix) {
  const int E = d.local_experts * d.num_ranks, H = d.hidden;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t self = tr.local();
  const int* counts = at<int>(self, lay.ll_recv_count);
  // a count is -1 after a timed-out dispatch (err is set): send nothing for it
  for (int i = threadIdx.x; i < E; i += blockDim.x)
    s_prefix[i + 1] = min(max(counts[i], 0), d.max_tokens);
  __syncthreads();
  if (warp == 0) {   // inclusive scan of s_prefix[1..E], 32 at a time
    int carry = 0;
    for (int base = 0; base < E; base += 32) {
      int v = base + lane < E ? s_prefix[base + lane + 1] : 0;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
      }
      if (base + lane < E) s_prefix[base + lane + 1] = carry + v;
      carry += __shfl_sync(0xffffffffu, v, 31);
    }
    if (lane == 0) s_prefix[0] = 0;
  }
  __syncthreads();
  const int total = s_prefix[E];
  const int warps = gridDim.x * (blockDim.x / 32);
  const int* recv_src = at<int>(self, lay.ll_recv_src);
  const __nv_bfloat16* y = at<__nv_bfloat16>(self, lay.ll_y);
  for (int r = warp * gridDim.x + blockIdx.x; r < total; r += warps) {
    int lo = 0, hi = E;   // the segment j with s_prefix[j] <= r < s_prefix[j + 1]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (s_prefix[mid] <= r) lo = mid; else hi = mid;
    }
    const long long slot = (long long)lo * d.max_tokens + (r - s_prefix[lo]);
    const int src = lo % d.num_ranks, tk = recv_src[slot];
    put_row<Transport, kSendUnroll>(tr, src, lay.ll_comb_buf + (long long)tk * H * 2, y + slot * H,
                                H * 2, lane);
    const long long flag = lay.ll_comb_flag + (long long)tk * 8;
    uint64_t* direct = kRelease ? static_cast<uint64_t*>(tr.mapped(src, flag)) : nullptr;
    if (direct) {
      __syncwarp();
      if (lane == 0) st_release_u64(direct, epoch);
    } else {
      tr.warp_flush(lane);
      __syncwarp();
      if (lane == 0) tr.signal_set(src, flag, epoch);
    }
  }
}

// Receive: one warp per (token, chunk of 32 x kVecs int4); lanes < K wait for the flags of
// the token's choices, then every lane loads its kVecs int4 of kBatch choices at once
// (16 int4 in flight per lane).
template <bool kWait>
__device__ void combine_reduce_chunks(const Dims& d, uint64_t self, const Layout& lay,
                                      const int* topk_idx, const float* topk_w,
                                      __nv_bfloat16* out, uint32_t epoch, int* err) {
  const int K = d.topk, H8 = d.hidden / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kVecs = kReduceVecs;
  const int chunk = 32 * kVecs, nchunks = (H8 + chunk - 1) / chunk;
  const int warps = gridDim.x * (blockDim.x / 32);
  constexpr int kBatch = kVecs >= 4 ? 4 : 8;
  const uint64_t* flags = at<uint64_t>(self, lay.ll_comb_flag);
  const int4* buf = at<int4>(self, lay.ll_comb_buf);
  for (int u = warp * gridDim.x + blockIdx.x; u < d.num_tokens * nchunks; u += warps) {
    const int t = u / nchunks, c0 = (u % nchunks) * chunk;
    int e = -1;
    float w = 0.f;
    if (lane < K) {
      e = topk_idx[t * K + lane];
      w = topk_w[t * K + lane];
      if (kWait && e >= 0) wait_count64(flags + (long long)t * K + lane, epoch, err);
    }
    __syncwarp();
    float acc[kVecs][8];
#pragma unroll
    for (int q = 0; q < kVecs; ++q)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[q][j] = 0.f;
    for (int k0 = 0; k0 < K; k0 += kBatch) {
      int4 v[kBatch][kVecs];
      bool valid[kBatch];
#pragma unroll
      for (int kk = 0; kk < kBatch; ++kk) {
        const int k = k0 + kk;
        valid[kk] = k < K && __shfl_sync(0xffffffffu, e, k & 31) >= 0;
        const int4* row = buf + ((long long)t * K + k) * H8 + c0 + lane;
#pragma unroll
        for (int q = 0; q < kVecs; ++q)
          v[kk][q] = valid[kk] && c0 + q * 32 + lane < H8 ? __ldcg(row + q * 32) : make_int4(0, 0, 0, 0);
      }
#pragma unroll
      for (int kk = 0; kk < kBatch; ++kk) {
        const float wk = __shfl_sync(0xffffffffu, w, (k0 + kk) & 31);
        if (!valid[kk]) continue;
#pragma unroll
        for (int q = 0; q < kVecs; ++q) fma_bf16x8(acc[q], v[kk][q], wk);
      }
    }
    int4* dst = reinterpret_cast<int4*>(out + (long long)t * d.hidden) + c0 + lane;
#pragma unroll
    for (int q = 0; q < kVecs; ++q)
      if (c0 + q * 32 + lane < H8) dst[q * 32] = pack_bf16x8(acc[q]);
  }
}

template <class Transport, bool kRelease, int kPhases = kSendAndReduce>
__global__ void __launch_bounds__(kLLWarps * 32)
ll_combine_rows(Transport tr, Dims d, Layout lay, const int* topk_idx, const float* topk_w,
                __nv_bfloat16* out, EpochCounter* epochs, int* err) {
  const uint32_t epoch = epoch_begin(epochs);
  extern __shared__ int s_prefix[];
  if (kPhases != kReduceOnly) combine_send_rows<Transport, kRelease>(tr, d, lay, epoch, s_prefix);
  if (kPhases != kSendOnly)
    combine_reduce_chunks<kPhases == kSendAndReduce>(d, tr.local(), lay, topk_idx, topk_w, out,
                                                     epoch, err);
  epoch_end(epochs, epoch);
}

// The earlier organisation (kCombinePerExpert): a block per (expert, source) segment sends its
// rows and counts them in ll_comb_cnt[expert]; a warp per token waits and reduces.
template <class Transport>
__global__ void __launch_bounds__(kLLWarps * 32)
ll_combine_per_expert(Transport tr, Dims d, Layout lay, const int* topk_idx, const float* topk_w,
                      __nv_bfloat16* out, EpochCounter* epochs, int* err) {
  const uint32_t epoch = epoch_begin(epochs);
  const int R = d.num_ranks, L = d.local_experts, K = d.topk, H = d.hidden;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t self = tr.local();

  for (int j = blockIdx.x; j < L * R; j += gridDim.x) {
    const int l = j / R, src = j % R;
    const int n = at<int>(self, lay.ll_recv_count)[j];
    const long long slot0 = (long long)j * d.max_tokens;
    for (int i = warp; i < n; i += kLLWarps) {
      const int tk = at<int>(self, lay.ll_recv_src)[slot0 + i];
      tr.put_warp(src, lay.ll_comb_buf + (long long)tk * H * 2,
                  at<__nv_bfloat16>(self, lay.ll_y) + (slot0 + i) * H, H * 2, lane);
    }
    tr.warp_flush(lane);
    __syncthreads();
    if (threadIdx.x == 0) tr.signal_add(src, lay.ll_comb_cnt + (d.rank * L + l) * 8, 1ull);
  }

  const uint64_t* cnt = at<uint64_t>(self, lay.ll_comb_cnt);
  const __nv_bfloat16* buf = at<__nv_bfloat16>(self, lay.ll_comb_buf);
  for (int t = blockIdx.x * kLLWarps + warp; t < d.num_tokens; t += gridDim.x * kLLWarps) {
    if (lane < K) {
      const int e = topk_idx[t * K + lane];
      if (e >= 0) wait_count64(cnt + e, epoch, err);
    }
    __syncwarp();
    for (int v = lane; v < H / 8; v += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < K; ++k) {
        if (topk_idx[t * K + k] < 0) continue;
        const int4* row = reinterpret_cast<const int4*>(buf + ((long long)t * K + k) * H);
        fma_bf16x8(acc, row[v], topk_w[t * K + k]);
      }
      reinterpret_cast<int4*>(out + (long long)t * H)[v] = pack_bf16x8(acc);
    }
  }
  epoch_end(epochs, epoch);
}

// Returns a cudaError_t as int.
template <class Transport>
int launch_ll_combine(Transport tr, const int* dims, const long long* offs, const int* topk_idx,
                      const float* topk_w, void* out, void* epochs, int num_sms, int variant,
                      int* err, cudaStream_t stream) {
  Dims d = dims_from(dims);
  const size_t smem = sizeof(int) * (d.local_experts * d.num_ranks + 1);
  if (d.hidden % 8 || smem > 48 * 1024) return int(cudaErrorInvalidValue);
  const Layout lay = layout_from(offs);
  __nv_bfloat16* o = static_cast<__nv_bfloat16*>(out);
  EpochCounter* ep = static_cast<EpochCounter*>(epochs);
  const dim3 grid(num_sms), block(kLLWarps * 32);
  switch (variant) {
    case kCombineRows:
      ll_combine_rows<Transport, true><<<grid, block, smem, stream>>>(tr, d, lay, topk_idx, topk_w, o, ep, err);
      break;
    case kCombinePerExpert:
      ll_combine_per_expert<Transport><<<grid, block, 0, stream>>>(tr, d, lay, topk_idx, topk_w, o, ep, err);
      break;
    case kCombineRowsFenced:
      ll_combine_rows<Transport, false><<<grid, block, smem, stream>>>(tr, d, lay, topk_idx, topk_w, o, ep, err);
      break;
    case kCombineSendOnly:
      ll_combine_rows<Transport, true, kSendOnly><<<grid, block, smem, stream>>>(tr, d, lay, topk_idx, topk_w, o, ep, err);
      break;
    case kCombineReduceOnly:
      ll_combine_rows<Transport, true, kReduceOnly><<<grid, block, smem, stream>>>(tr, d, lay, topk_idx, topk_w, o, ep, err);
      break;
    default:
      return int(cudaErrorInvalidValue);
  }
  return int(cudaGetLastError());
}

}  // namespace moe
