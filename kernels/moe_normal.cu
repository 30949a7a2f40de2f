// MoE dispatch/combine, normal (high-throughput) mode, standard layout, over
// peer pointers (CUDA IPC). Received rows are compact at every destination,
// ordered by source rank, then source token. Epochs live on the device
// (EpochCounter), so both launches can be captured in a CUDA graph.
#include "moe_common.cuh"

using namespace moe;

constexpr int kMaxRanks = 64;
constexpr int kWarps = 16;

// Dispatch: publish counts, learn where our rows start at each destination,
// push rows (+ scales, routing metadata), then wait for every source's rows.
__global__ void __launch_bounds__(kWarps * 32)
normal_dispatch(const uint64_t* peers, Dims d, Layout lay, const int* send_pos,
                const int* send_count, const int* expert_count, const int* topk_idx,
                const float* topk_w, const uint8_t* x, const float* scales, int* base_off,
                EpochCounter* epochs, int* err) {
  const uint32_t epoch = epoch_begin(epochs);
  __shared__ int s_base[kMaxRanks];
  const int R = d.num_ranks, L = d.local_experts, K = d.topk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (blockIdx.x == 0) {
    // Expert counts first, then the tagged token count that releases them.
    for (int i = threadIdx.x; i < R * L; i += blockDim.x) {
      int dst = i / L, l = i % L;
      at<int>(peers[dst], lay.expert_cnt_in)[d.rank * L + l] = expert_count[i];
    }
    __syncthreads();
    if (threadIdx.x < R) {
      __threadfence_system();
      st_release_u64(at<uint64_t>(peers[threadIdx.x], lay.cnt_in) + d.rank,
                     tag(epoch, send_count[threadIdx.x]));
    }
  }
  // Our base offset at destination dst = tokens that lower ranks send there.
  if (threadIdx.x < R) {
    const int dst = threadIdx.x;
    const uint64_t* cnt = at<uint64_t>(peers[dst], lay.cnt_in);
    int base = 0;
    for (int s = 0; s < d.rank; ++s) base += max(wait_tagged(cnt + s, epoch, err), 0);
    s_base[dst] = base;
    if (blockIdx.x == 0) base_off[dst] = base;
  }
  __syncthreads();

  for (int t = blockIdx.x * kWarps + warp; t < d.num_tokens; t += gridDim.x * kWarps) {
    for (int dst = 0; dst < R; ++dst) {
      const int p = send_pos[t * R + dst];
      if (p < 0) continue;
      const long long pos = s_base[dst] + p;
      const uint64_t peer = peers[dst];
      warp_copy16(at<uint8_t>(peer, lay.recv_x) + pos * d.row_bytes,
                  x + (long long)t * d.row_bytes, d.row_bytes, lane);
      if (d.num_scales)
        warp_copy4(at<float>(peer, lay.recv_scales) + pos * d.num_scales,
                   scales + (long long)t * d.num_scales, d.num_scales, lane);
      if (lane < K) {
        const int e = topk_idx[t * K + lane];
        const bool mine = e >= dst * L && e < (dst + 1) * L;
        at<int>(peer, lay.recv_topk_idx)[pos * K + lane] = mine ? e - dst * L : -1;
        at<float>(peer, lay.recv_topk_w)[pos * K + lane] = mine ? topk_w[t * K + lane] : 0.f;
      }
      if (lane == 0) {
        at<int>(peer, lay.recv_src)[pos * 2] = d.rank;
        at<int>(peer, lay.recv_src)[pos * 2 + 1] = t;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < R) {
    __threadfence_system();  // our rows are visible before the arrival is counted
    atomicAdd_system(at<uint32_t>(peers[threadIdx.x], lay.done_in) + d.rank, 1u);
  }
  if (blockIdx.x == 0 && threadIdx.x < R) {
    const uint32_t* done = at<uint32_t>(peers[d.rank], lay.done_in);
    wait_count(done + threadIdx.x, epoch * gridDim.x, err);
  }
  epoch_end(epochs, epoch);
}

// Combine (pull): wait until every rank's expert outputs are ready, then each
// warp reduces one token: out[t] = sum over destination ranks of w * y_dst[row].
__global__ void __launch_bounds__(kWarps * 32)
normal_combine(const uint64_t* peers, Dims d, Layout lay, const int* send_pos,
               const int* base_off, const float* rank_w, __nv_bfloat16* out,
               EpochCounter* epochs, int* err) {
  const uint32_t epoch = epoch_begin(epochs);
  __shared__ int s_base[kMaxRanks];
  const int R = d.num_ranks, H = d.hidden;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x == 0 && threadIdx.x < R) {
    __threadfence_system();
    atomicAdd_system(at<uint32_t>(peers[threadIdx.x], lay.ready_in) + d.rank, 1u);
  }
  if (threadIdx.x < R) {
    wait_count(at<uint32_t>(peers[d.rank], lay.ready_in) + threadIdx.x, epoch, err);
    s_base[threadIdx.x] = base_off[threadIdx.x];
  }
  __syncthreads();
  for (int t = blockIdx.x * kWarps + warp; t < d.num_tokens; t += gridDim.x * kWarps) {
    for (int v = lane; v < H / 8; v += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int dst = 0; dst < R; ++dst) {
        const int p = send_pos[t * R + dst];
        if (p < 0) continue;
        const int4* row = reinterpret_cast<const int4*>(
            at<__nv_bfloat16>(peers[dst], lay.y) + (long long)(s_base[dst] + p) * H);
        fma_bf16x8(acc, row[v], rank_w[t * R + dst]);
      }
      reinterpret_cast<int4*>(out + (long long)t * H)[v] = pack_bf16x8(acc);
    }
  }
  epoch_end(epochs, epoch);
}

extern "C" int moe_normal_dispatch(const uint64_t* peers, const int* dims, const long long* offs,
                                   const int* send_pos, const int* send_count,
                                   const int* expert_count, const int* topk_idx,
                                   const float* topk_w, const void* x, const float* scales,
                                   int* base_off, void* epochs, int num_sms, int* err,
                                   cudaStream_t stream) {
  Dims d = dims_from(dims);
  if (d.num_ranks > kMaxRanks) return int(cudaErrorInvalidValue);
  normal_dispatch<<<num_sms, kWarps * 32, 0, stream>>>(
      peers, d, layout_from(offs), send_pos, send_count, expert_count, topk_idx, topk_w,
      static_cast<const uint8_t*>(x), scales, base_off, static_cast<EpochCounter*>(epochs), err);
  return int(cudaGetLastError());
}

extern "C" int moe_normal_combine(const uint64_t* peers, const int* dims, const long long* offs,
                                  const int* send_pos, const int* base_off, const float* rank_w,
                                  void* out, void* epochs, int num_sms, int* err,
                                  cudaStream_t stream) {
  Dims d = dims_from(dims);
  if (d.num_ranks > kMaxRanks || d.hidden % 8) return int(cudaErrorInvalidValue);
  normal_combine<<<num_sms, kWarps * 32, 0, stream>>>(
      peers, d, layout_from(offs), send_pos, base_off, rank_w,
      static_cast<__nv_bfloat16*>(out), static_cast<EpochCounter*>(epochs), err);
  return int(cudaGetLastError());
}
