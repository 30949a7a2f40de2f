// MoE dispatch/combine, low-latency mode: batched layout
// [local_experts, ranks * max_tokens, hidden] plus per-(expert, source) counts,
// one message per (token, expert) selection, each count released by a flag
// after its rows. Peer pointers (CUDA IPC) carry the puts and the flags.
#include "moe_common.cuh"

using namespace moe;

constexpr int kWarps = 16;

// Dispatch: each block owns experts; warp 0 lists the tokens that chose the
// expert (in token order, so the layout is deterministic), all warps push the
// rows, thread 0 releases the count. Then wait for every incoming count.
__global__ void __launch_bounds__(kWarps * 32)
ll_dispatch(const uint64_t* peers, Dims d, Layout lay, const int* topk_idx, const uint8_t* x,
            const float* scales, uint32_t epoch, int* err) {
  extern __shared__ int s_list[];
  __shared__ int s_count;
  const int R = d.num_ranks, L = d.local_experts, K = d.topk, T = d.num_tokens;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t self = peers[d.rank];

  for (int e = blockIdx.x; e < d.num_experts; e += gridDim.x) {
    const int dst = e / L, l = e % L;
    if (warp == 0) {
      int n = 0;
      for (int base = 0; base < T; base += 32) {
        const int t = base + lane;
        int kk = -1;
        if (t < T)
          for (int k = 0; k < K; ++k)
            if (topk_idx[t * K + k] == e) { kk = k; break; }
        const unsigned mask = __ballot_sync(0xffffffffu, kk >= 0);
        if (kk >= 0) s_list[n + __popc(mask & ((1u << lane) - 1))] = t * K + kk;
        n += __popc(mask);
      }
      if (lane == 0) s_count = n;
    }
    __syncthreads();
    const int n = s_count;
    const uint64_t peer = peers[dst];
    const long long slot0 = ((long long)l * R + d.rank) * d.max_tokens;
    for (int i = warp; i < n; i += kWarps) {
      const int tk = s_list[i], t = tk / K;
      warp_copy16(at<uint8_t>(peer, lay.ll_recv_x) + (slot0 + i) * d.row_bytes,
                  x + (long long)t * d.row_bytes, d.row_bytes, lane);
      if (d.num_scales)
        warp_copy4(at<float>(peer, lay.ll_recv_scales) + (slot0 + i) * d.num_scales,
                   scales + (long long)t * d.num_scales, d.num_scales, lane);
      if (lane == 0) at<int>(peer, lay.ll_recv_src)[slot0 + i] = tk;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      st_release_u64(at<uint64_t>(peer, lay.ll_cnt_in) + l * R + d.rank, tag(epoch, n));
    }
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < L * R; i += gridDim.x * blockDim.x)
    at<int>(self, lay.ll_recv_count)[i] =
        wait_tagged(at<uint64_t>(self, lay.ll_cnt_in) + i, epoch, err);
}

// Combine: send every expert output row back to its token's slot [token][k]
// at the source, count per expert; then each warp waits for its token's
// experts and reduces out[t] = sum_k w[t,k] * row[t,k].
__global__ void __launch_bounds__(kWarps * 32)
ll_combine(const uint64_t* peers, Dims d, Layout lay, const int* topk_idx, const float* topk_w,
           __nv_bfloat16* out, uint32_t epoch, int* err) {
  const int R = d.num_ranks, L = d.local_experts, K = d.topk, H = d.hidden;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint64_t self = peers[d.rank];

  for (int j = blockIdx.x; j < L * R; j += gridDim.x) {
    const int l = j / R, src = j % R;
    const int n = at<int>(self, lay.ll_recv_count)[j];
    const long long slot0 = (long long)j * d.max_tokens;
    for (int i = warp; i < n; i += kWarps) {
      const int tk = at<int>(self, lay.ll_recv_src)[slot0 + i];
      warp_copy16(at<__nv_bfloat16>(peers[src], lay.ll_comb_buf) + (long long)tk * H,
                  at<__nv_bfloat16>(self, lay.ll_y) + (slot0 + i) * H, H * 2, lane);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      atomicAdd_system(at<uint32_t>(peers[src], lay.ll_comb_cnt) + d.rank * L + l, 1u);
    }
  }

  const uint32_t* cnt = at<uint32_t>(self, lay.ll_comb_cnt);
  const __nv_bfloat16* buf = at<__nv_bfloat16>(self, lay.ll_comb_buf);
  for (int t = blockIdx.x * kWarps + warp; t < d.num_tokens; t += gridDim.x * kWarps) {
    if (lane < K) {
      const int e = topk_idx[t * K + lane];
      if (e >= 0) wait_count(cnt + e, epoch, err);
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
}

extern "C" int moe_ll_dispatch(const uint64_t* peers, const int* dims, const long long* offs,
                               const int* topk_idx, const void* x, const float* scales,
                               unsigned epoch, int num_sms, int* err, cudaStream_t stream) {
  Dims d = dims_from(dims);
  const size_t smem = sizeof(int) * d.max_tokens;
  if (d.num_tokens > d.max_tokens || smem > 48 * 1024) return int(cudaErrorInvalidValue);
  ll_dispatch<<<num_sms, kWarps * 32, smem, stream>>>(
      peers, d, layout_from(offs), topk_idx, static_cast<const uint8_t*>(x), scales, epoch, err);
  return int(cudaGetLastError());
}

extern "C" int moe_ll_combine(const uint64_t* peers, const int* dims, const long long* offs,
                              const int* topk_idx, const float* topk_w, void* out,
                              unsigned epoch, int num_sms, int* err, cudaStream_t stream) {
  Dims d = dims_from(dims);
  if (d.hidden % 8) return int(cudaErrorInvalidValue);
  ll_combine<<<num_sms, kWarps * 32, 0, stream>>>(peers, d, layout_from(offs), topk_idx, topk_w,
                                                  static_cast<__nv_bfloat16*>(out), epoch, err);
  return int(cudaGetLastError());
}
