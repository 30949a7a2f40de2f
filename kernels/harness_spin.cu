// Known-length spin kernels for the harness's known-answer timeline Case (families/harness/overlap.py):
// one thread waits on the GPU's global nanosecond timer, so a kernel lasts the time it is given
// whatever the clock speed, and two of them on two streams run side by side (one block each).
// Two names, so the timeline can tell the Case's "compute" from its stand-in "communication".
#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void spin_for(long long ns) {
  const unsigned long long end = global_ns() + static_cast<unsigned long long>(ns);
  while (global_ns() < end) {
  }
}

}  // namespace

__global__ void commbench_compute_spin(long long ns) { spin_for(ns); }

__global__ void commbench_comm_standin(long long ns) { spin_for(ns); }

// kind 0: compute, 1: the communication stand-in. Returns a cudaError_t (0: launched).
extern "C" int cb_spin(int kind, long long ns, cudaStream_t stream) {
  if (kind == 0)
    commbench_compute_spin<<<1, 1, 0, stream>>>(ns);
  else
    commbench_comm_standin<<<1, 1, 0, stream>>>(ns);
  return static_cast<int>(cudaGetLastError());
}
