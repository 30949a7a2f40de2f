// Cross-rank flag barrier for kernels that exchange data through peer pointers.
//
// Every rank owns a flag area that its peers write into. Block b of each rank
// only waits for block b of the peers: both kernels split the data the same
// way, so block b only ever reads what the peers' block b wrote. Epochs grow
// monotonically per block, which lets a fast peer run one barrier ahead
// without a reset (comparison is >=, not ==).
#pragma once
#include <cstdint>

namespace cb_allreduce {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 64;
// Flag area layout (uint32 words): [kMaxBlocks][kMaxRanks] arrival slots written
// by peers, then [kMaxBlocks] epoch counters written only by the owner.
constexpr int kEpochOffset = kMaxBlocks * kMaxRanks;
constexpr int kFlagWords = kEpochOffset + kMaxBlocks;

__device__ __forceinline__ void store_release_sys(uint32_t* addr, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* addr) {
  uint32_t value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(addr) : "memory");
  return value;
}

// All threads of the block call this. Work done by the block before the call
// is visible to every peer's block after the call (release is cumulative over
// the preceding __syncthreads).
__device__ __forceinline__ void block_barrier(uint32_t* const* flags, int rank, int nranks,
                                              uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x < nranks) {
    uint32_t* remote = flags[threadIdx.x] + blockIdx.x * kMaxRanks + rank;
    store_release_sys(remote, epoch);
    const uint32_t* mine = flags[rank] + blockIdx.x * kMaxRanks + threadIdx.x;
    while (load_acquire_sys(mine) < epoch) {
    }
  }
  __syncthreads();
}

}  // namespace cb_allreduce
