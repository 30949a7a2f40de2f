// MoE low-latency dispatch/combine over NVSHMEM (backend nvshmem_ll).
// The kernels are in moe_ll_kernels.cuh and moe_ll_combine.cuh. The workspace is one symmetric
// allocation (the same address on every PE). A peer that NVSHMEM maps into
// this process (nvshmem_ptr, NVLink/PCIe P2P) gets plain 16-byte warp stores;
// any other peer gets warp-wide non-blocking puts (RDMA writes over IBRC /
// IBGDA). Each warp completes its puts (quiet) before its block's count is
// released with nvshmemx_signal_op. Sources are symmetric too (the input is staged in the workspace),
// as remote transports need registered memory on both ends.
#include "moe_ll_combine.cuh"
#include "nvshmem_common.cuh"

using namespace moe;

struct NvshmemTransport {
  uint64_t base;  // symmetric address of the workspace

  __device__ uint64_t local() const { return base; }
  __device__ void* mapped(int pe, long long off) const {
    return nvshmem_ptr(reinterpret_cast<void*>(base + off), pe);
  }
  // On the host: nvshmem_ptr answers for the same symmetric heap (null where not P2P).
  bool all_mapped(int npes) const {
    for (int pe = 0; pe < npes; ++pe)
      if (!nvshmem_ptr(reinterpret_cast<void*>(base), pe)) return false;
    return true;
  }
  __device__ void put_warp(int pe, long long off, const void* src, int bytes, int lane) const {
    void* dst = reinterpret_cast<void*>(base + off);
    if (void* mapped = nvshmem_ptr(dst, pe))
      warp_copy(mapped, src, bytes, lane);
    else
      nvshmemx_putmem_nbi_warp(dst, src, bytes, pe);
  }
  __device__ void put_int(int pe, long long off, int value) const {
    if (int* mapped = static_cast<int*>(nvshmem_ptr(at<int>(base, off), pe)))
      *mapped = value;
    else
      nvshmem_int_p(at<int>(base, off), value, pe);
  }
  __device__ void warp_flush(int lane) const {
    __syncwarp();
    if (lane == 0) nvshmem_quiet();
    __syncwarp();
  }
  __device__ void signal_set(int pe, long long off, uint64_t value) const {
    nvshmem_fence();
    nvshmemx_signal_op(at<uint64_t>(base, off), value, NVSHMEM_SIGNAL_SET, pe);
  }
  __device__ void signal_add(int pe, long long off, uint64_t value) const {
    nvshmem_fence();
    nvshmemx_signal_op(at<uint64_t>(base, off), value, NVSHMEM_SIGNAL_ADD, pe);
  }
};

extern "C" {

int moe_shmem_attach(int device) { return commbench_nvshmem_attach(device); }

int moe_shmem_ll_dispatch(void* base, const int* dims, const long long* offs, const int* topk_idx,
                          const void* x, const float* scales, void* epochs, int num_sms,
                          int variant, int* err, cudaStream_t stream) {
  return launch_ll_dispatch(NvshmemTransport{reinterpret_cast<uint64_t>(base)}, dims, offs,
                            topk_idx, x, scales, epochs, num_sms, variant, err, stream);
}

int moe_shmem_ll_combine(void* base, const int* dims, const long long* offs, const int* topk_idx,
                         const float* topk_w, void* out, void* epochs, int num_sms, int variant,
                         int* err, cudaStream_t stream) {
  return launch_ll_combine(NvshmemTransport{reinterpret_cast<uint64_t>(base)}, dims, offs,
                           topk_idx, topk_w, out, epochs, num_sms, variant, err, stream);
}

}  // extern "C"
