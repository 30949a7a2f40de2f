// MoE low-latency dispatch/combine over CUDA IPC peer pointers (backend ipc_ll).
// The kernels are in moe_ll_kernels.cuh and moe_ll_combine.cuh; here puts are plain stores into the
// peer's mapped workspace and signals are release stores / system atomics.
#include "moe_ll_combine.cuh"

using namespace moe;

struct IpcTransport {
  const uint64_t* peers;  // peers[r]: rank r's workspace, mapped here
  int rank;

  __device__ uint64_t local() const { return peers[rank]; }
  __device__ void* mapped(int pe, long long off) const { return at<uint8_t>(peers[pe], off); }
  bool all_mapped(int) const { return true; }
  __device__ void put_warp(int pe, long long off, const void* src, int bytes, int lane) const {
    warp_copy(at<uint8_t>(peers[pe], off), src, bytes, lane);
  }
  __device__ void put_int(int pe, long long off, int value) const {
    *at<int>(peers[pe], off) = value;
  }
  __device__ void warp_flush(int) const {}
  __device__ void signal_set(int pe, long long off, uint64_t value) const {
    __threadfence_system();
    st_release_u64(at<uint64_t>(peers[pe], off), value);
  }
  __device__ void signal_add(int pe, long long off, uint64_t value) const {
    __threadfence_system();
    atomicAdd_system(at<unsigned long long>(peers[pe], off), (unsigned long long)value);
  }
};

extern "C" int moe_ll_dispatch(const uint64_t* peers, const int* dims, const long long* offs,
                               const int* topk_idx, const void* x, const float* scales,
                               void* epochs, int num_sms, int variant, int* err,
                               cudaStream_t stream) {
  return launch_ll_dispatch(IpcTransport{peers, dims[0]}, dims, offs, topk_idx, x, scales, epochs,
                            num_sms, variant, err, stream);
}

extern "C" int moe_ll_combine(const uint64_t* peers, const int* dims, const long long* offs,
                              const int* topk_idx, const float* topk_w, void* out, void* epochs,
                              int num_sms, int variant, int* err, cudaStream_t stream) {
  return launch_ll_combine(IpcTransport{peers, dims[0]}, dims, offs, topk_idx, topk_w, out,
                           epochs, num_sms, variant, err, stream);
}
