// Expert side of an MoE layer: turn what a dispatch delivered into rows grouped
// by local expert (the layout a grouped GEMM takes: contiguous groups and their
// cumulative ends), dequantising FP8 on the way, and put the expert outputs back
// where the combine reads them.
//
// Two input layouts:
//  - rows:  one received row per (source, token) with its top-k expert ids and
//           weights (standard layout: our normal mode, NCCL, DeepEP normal);
//           unpack writes, per received row, sum_k w_k * expert_k(row).
//  - slots: a batched [local_experts, slots, hidden] buffer whose segments of
//           consecutive slots hold counts[seg] valid rows (low-latency layout:
//           ours has one segment per (expert, source), DeepEP's one per expert);
//           unpack writes each expert output to its slot, unweighted (the
//           low-latency combine applies the weights at the source).
// Everything is read on the device: counts and group ends never reach the host,
// so the whole expert step can be enqueued without a sync (and captured).
#include <cuda_fp8.h>

#include "moe_common.cuh"

using namespace moe;

namespace {

constexpr int kThreads = 256;   // 8 warps; one warp per row
constexpr int kWarps = kThreads / 32;
constexpr int kScanThreads = 1024;
constexpr int kFp8Block = 128;  // channels per FP8 scale
constexpr int kMaxTopk = 32;

// Argument arrays from the host (int64 each, in this order).
enum RowsArg { kRx, kRxStride, kRScales, kRsStride, kRIdx, kRIdxStride, kRIdx64, kRIdxBase,
               kRW, kRWStride, kRN, kRK, kRL, kRowsArgs };
enum SlotsArg { kSx, kSxStride, kSScales, kSsExpert, kSsRow, kSsCol, kSCounts, kSNumSegs,
                kSSegsPerExpert, kSSegRows, kSL, kSlotsArgs };

struct Rows {
  const uint8_t* x; long long x_stride;     // bytes between rows
  const float* scales; long long s_stride;  // floats between rows (FP8 only)
  const void* idx; long long idx_stride;    // elements between rows
  int idx64, idx_base;                      // int64 ids?  local expert = id - idx_base
  const float* w; long long w_stride;       // floats between rows
  int n, k, l;                              // rows, top-k, local experts
};

struct Slots {
  const uint8_t* x; long long x_stride;                 // bytes between slots
  const float* scales; long long s_expert, s_row, s_col; // float strides (any order)
  const int* counts;                                    // valid rows per segment
  int num_segs, segs_per_expert; long long seg_rows;    // a segment holds seg_rows slots
  int l;
};

Rows rows_from(const long long* a) {
  return Rows{reinterpret_cast<const uint8_t*>(a[kRx]), a[kRxStride],
              reinterpret_cast<const float*>(a[kRScales]), a[kRsStride],
              reinterpret_cast<const void*>(a[kRIdx]), a[kRIdxStride], int(a[kRIdx64]),
              int(a[kRIdxBase]), reinterpret_cast<const float*>(a[kRW]), a[kRWStride],
              int(a[kRN]), int(a[kRK]), int(a[kRL])};
}

Slots slots_from(const long long* a) {
  return Slots{reinterpret_cast<const uint8_t*>(a[kSx]), a[kSxStride],
               reinterpret_cast<const float*>(a[kSScales]), a[kSsExpert], a[kSsRow], a[kSsCol],
               reinterpret_cast<const int*>(a[kSCounts]), int(a[kSNumSegs]),
               int(a[kSSegsPerExpert]), a[kSSegRows], int(a[kSL])};
}

__device__ __forceinline__ int local_expert(const Rows& in, long long row, int k) {
  const long long at = row * in.idx_stride + k;
  const long long id = in.idx64 ? static_cast<const long long*>(in.idx)[at]
                                : static_cast<const int*>(in.idx)[at];
  const long long l = id - in.idx_base;
  return (id >= 0 && l >= 0 && l < in.l) ? int(l) : -1;
}

// Eight channels of a row as BF16: a copy, or FP8 values times their block's scale
// (the same FP32 product and round-to-nearest as reference.dequantize_fp8).
__device__ __forceinline__ int4 load8(const uint8_t* row, bool fp8, const float* srow,
                                      long long s_col, int v) {
  if (!fp8) return reinterpret_cast<const int4*>(row)[v];
  const uint2 raw = reinterpret_cast<const uint2*>(row)[v];
  const float s = srow[(long long)(v * 8 / kFp8Block) * s_col];
  const __nv_fp8_e4m3* q = reinterpret_cast<const __nv_fp8_e4m3*>(&raw);
  float f[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = float(q[j]) * s;
  return pack_bf16x8(f);
}

__global__ void count_rows(Rows in, int* counts) {
  const long long total = (long long)in.n * in.k;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int l = local_expert(in, i / in.k, int(i % in.k));
    if (l >= 0) atomicAdd(counts + l, 1);
  }
}

// Exclusive prefix sum of counts (each clamped to 0..max_count) into starts, and
// the inclusive sum at the end of every group of `per_group` entries into ends.
// One block. Flags err when the total exceeds the rows the buffers hold.
__global__ void __launch_bounds__(kScanThreads)
scan_groups(const int* counts, int n, int per_group, int max_count, int* starts, int* ends,
            int cap, int* err) {
  __shared__ int s_warp[kScanThreads / 32];
  __shared__ int s_carry;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  if (threadIdx.x == 0) s_carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    int v = i < n ? counts[i] : 0;
    if (v < 0 || v > max_count) {
      atomicExch(err, 1);   // a count no dispatch can deliver
      v = min(max(v, 0), max_count);
    }
    int incl = v;
    for (int d = 1; d < 32; d <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += t;
    }
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int w = lane < nwarps ? s_warp[lane] : 0;
      for (int d = 1; d < 32; d <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w += t;
      }
      if (lane < nwarps) s_warp[lane] = w;
    }
    __syncthreads();
    const int before = s_carry + (warp ? s_warp[warp - 1] : 0) + incl - v;
    if (i < n) {
      starts[i] = before;
      // clamped to the rows the buffers hold (err says so below), so the grouped GEMM that reads
      // ends never sees an offset past its input
      if ((i + 1) % per_group == 0) ends[i / per_group] = min(before + v, cap);
    }
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) s_carry = before + v;
    __syncthreads();
  }
  if (threadIdx.x == 0 && s_carry > cap) atomicExch(err, 1);
}

// One warp per received row: claim a place in each chosen local expert's group,
// then copy (dequantise) the row into every place it claimed.
__global__ void __launch_bounds__(kThreads)
pack_rows(Rows in, int hidden, int fp8, int* cursor, int cap, __nv_bfloat16* xe, int* pair_pos,
          int* err) {
  __shared__ int s_pos[kWarps][kMaxTopk];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long nwarps = (long long)gridDim.x * kWarps;
  for (long long r = blockIdx.x * (long long)kWarps + warp; r < in.n; r += nwarps) {
    if (lane < in.k) {
      int pos = -1;
      const int l = local_expert(in, r, lane);
      if (l >= 0) {
        pos = atomicAdd(cursor + l, 1);
        if (pos >= cap) {
          atomicExch(err, 1);
          pos = -1;
        }
      }
      pair_pos[r * in.k + lane] = pos;
      s_pos[warp][lane] = pos;
    }
    __syncwarp();
    const uint8_t* row = in.x + r * in.x_stride;
    const float* srow = fp8 ? in.scales + r * in.s_stride : nullptr;
    for (int v = lane; v < hidden / 8; v += 32) {
      const int4 val = load8(row, fp8, srow, 1, v);
      for (int k = 0; k < in.k; ++k) {
        const int pos = s_pos[warp][k];
        if (pos >= 0) reinterpret_cast<int4*>(xe + (long long)pos * hidden)[v] = val;
      }
    }
    __syncwarp();
  }
}

// One warp per received row: out[r] = sum_k w[r,k] * ye[pair_pos[r,k]] (FP32 sum),
// zero for a row none of whose experts is local.
template <bool kF32>
__global__ void __launch_bounds__(kThreads)
unpack_rows(Rows in, int hidden, const int* pair_pos, const __nv_bfloat16* ye, void* out,
            long long out_stride) {
  __shared__ int s_pos[kWarps][kMaxTopk];
  __shared__ float s_w[kWarps][kMaxTopk];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long nwarps = (long long)gridDim.x * kWarps;
  for (long long r = blockIdx.x * (long long)kWarps + warp; r < in.n; r += nwarps) {
    if (lane < in.k) {
      const int pos = pair_pos[r * in.k + lane];
      s_pos[warp][lane] = pos;
      s_w[warp][lane] = pos >= 0 ? in.w[r * in.w_stride + lane] : 0.f;
    }
    __syncwarp();
    for (int v = lane; v < hidden / 8; v += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < in.k; ++k) {
        const int pos = s_pos[warp][k];
        if (pos >= 0)
          fma_bf16x8(acc, reinterpret_cast<const int4*>(ye + (long long)pos * hidden)[v],
                     s_w[warp][k]);
      }
      if (kF32) {
        float4* o = reinterpret_cast<float4*>(static_cast<float*>(out) + r * out_stride) + 2 * v;
        o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      } else {
        reinterpret_cast<int4*>(static_cast<__nv_bfloat16*>(out) + r * out_stride)[v] =
            pack_bf16x8(acc);
      }
    }
    __syncwarp();
  }
}

// Blocks take segments, warps take the segment's valid rows: copy (dequantise)
// each into its group's place and remember which slot it came from.
__global__ void __launch_bounds__(kThreads)
pack_slots(Slots in, int hidden, int fp8, const int* starts, int cap, __nv_bfloat16* xe,
           int* pair_slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = blockIdx.x; j < in.num_segs; j += gridDim.x) {
    const long long count = min(max(in.counts[j], 0), int(in.seg_rows));
    const int start = starts[j];
    const int l = j / in.segs_per_expert;
    for (long long i = warp; i < count; i += kWarps) {
      const long long dst = start + i;
      if (dst >= cap) break;   // flagged by scan_groups
      const long long slot = j * in.seg_rows + i;
      const long long r = slot - (long long)l * in.segs_per_expert * in.seg_rows;
      const float* srow = fp8 ? in.scales + l * in.s_expert + r * in.s_row : nullptr;
      const uint8_t* row = in.x + slot * in.x_stride;
      for (int v = lane; v < hidden / 8; v += 32)
        reinterpret_cast<int4*>(xe + dst * hidden)[v] = load8(row, fp8, srow, in.s_col, v);
      if (lane == 0) pair_slot[dst] = int(slot);
    }
  }
}

// One warp per expert output row: copy it back to the slot its input came from.
__global__ void __launch_bounds__(kThreads)
unpack_slots(int hidden, const int* ends, int num_local, int cap, const int* pair_slot,
             const __nv_bfloat16* ye, __nv_bfloat16* y, long long y_stride) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long total = min(ends[num_local - 1], cap);
  for (long long dst = blockIdx.x * (long long)kWarps + warp; dst < total;
       dst += (long long)gridDim.x * kWarps) {
    const int4* src = reinterpret_cast<const int4*>(ye + dst * hidden);
    int4* out = reinterpret_cast<int4*>(y + (long long)pair_slot[dst] * y_stride);
    for (int v = lane; v < hidden / 8; v += 32) out[v] = src[v];
  }
}

int grid_for(long long warps_needed) {
  const long long blocks = (warps_needed + kWarps - 1) / kWarps;
  return int(max(1ll, min(blocks, 8192ll)));
}

}  // namespace

// Rows layout: group the received rows by local expert into xe [cap, hidden]
// (group ends in ends[L]); pair_pos[n*k] remembers each (row, choice)'s place.
extern "C" int moe_pack_rows(const long long* args, int hidden, int fp8, int cap, int* counts,
                             int* cursor, int* ends, void* xe, int* pair_pos, int* err,
                             cudaStream_t stream) {
  const Rows in = rows_from(args);
  if (hidden % 8 || in.k < 1 || in.k > kMaxTopk || in.l < 1) return int(cudaErrorInvalidValue);
  cudaError_t e = cudaMemsetAsync(counts, 0, sizeof(int) * in.l, stream);
  if (e != cudaSuccess) return int(e);
  if (in.n > 0) {
    count_rows<<<grid_for((long long)in.n * in.k / 32 + 1), kThreads, 0, stream>>>(in, counts);
  }
  scan_groups<<<1, kScanThreads, 0, stream>>>(counts, in.l, 1, 0x7fffffff, cursor, ends, cap, err);
  if (in.n > 0) {
    pack_rows<<<grid_for(in.n), kThreads, 0, stream>>>(
        in, hidden, fp8, cursor, cap, static_cast<__nv_bfloat16*>(xe), pair_pos, err);
  }
  return int(cudaGetLastError());
}

extern "C" int moe_unpack_rows(const long long* args, int hidden, const int* pair_pos,
                               const void* ye, void* out, long long out_stride, int out_f32,
                               cudaStream_t stream) {
  const Rows in = rows_from(args);
  if (hidden % 8 || in.k < 1 || in.k > kMaxTopk) return int(cudaErrorInvalidValue);
  if (in.n == 0) return int(cudaSuccess);
  const auto* y = static_cast<const __nv_bfloat16*>(ye);
  if (out_f32)
    unpack_rows<true><<<grid_for(in.n), kThreads, 0, stream>>>(in, hidden, pair_pos, y, out,
                                                                out_stride);
  else
    unpack_rows<false><<<grid_for(in.n), kThreads, 0, stream>>>(in, hidden, pair_pos, y, out,
                                                                 out_stride);
  return int(cudaGetLastError());
}

// Slots layout: valid rows of every segment into xe [cap, hidden], grouped by
// local expert (segments of one expert are consecutive), group ends in ends[L].
extern "C" int moe_pack_slots(const long long* args, int hidden, int fp8, int cap, int* starts,
                              int* ends, void* xe, int* pair_slot, int* err,
                              cudaStream_t stream) {
  const Slots in = slots_from(args);
  if (hidden % 8 || in.num_segs < 1 || in.segs_per_expert < 1 ||
      in.num_segs != in.l * in.segs_per_expert || in.seg_rows > 0x7fffffff)
    return int(cudaErrorInvalidValue);
  scan_groups<<<1, kScanThreads, 0, stream>>>(in.counts, in.num_segs, in.segs_per_expert,
                                              int(in.seg_rows), starts, ends, cap, err);
  pack_slots<<<min(in.num_segs, 4096), kThreads, 0, stream>>>(
      in, hidden, fp8, starts, cap, static_cast<__nv_bfloat16*>(xe), pair_slot);
  return int(cudaGetLastError());
}

extern "C" int moe_unpack_slots(int hidden, const int* ends, int num_local, int cap,
                                const int* pair_slot, const void* ye, void* y,
                                long long y_stride, cudaStream_t stream) {
  if (hidden % 8 || num_local < 1) return int(cudaErrorInvalidValue);
  if (cap == 0) return int(cudaSuccess);
  unpack_slots<<<grid_for(cap), kThreads, 0, stream>>>(
      hidden, ends, num_local, cap, pair_slot, static_cast<const __nv_bfloat16*>(ye),
      static_cast<__nv_bfloat16*>(y), y_stride);
  return int(cudaGetLastError());
}
