// Executors: what a proxy thread does with a command. One instance per proxy
// thread. transfer() starts the data movement for a batch; signal() makes a
// producer's completion count visible once everything started so far is done.
// An RDMA executor would post one work request per command in transfer() and
// an RDMA write of the completion word in signal().
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector>
#include "proxy_ring.cuh"

namespace cbproxy {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual int transfer(const Cmd* cmds, int n) = 0;   // 0 or a cudaError_t
  virtual int signal(uint32_t* done_word, uint32_t value) = 0;
};

// Delivery only: acknowledge without moving data (the ring's own cost).
class AckExecutor : public Executor {
 public:
  int transfer(const Cmd*, int) override { return 0; }
  int signal(uint32_t* done_word, uint32_t value) override {
    __atomic_store_n(done_word, value, __ATOMIC_RELEASE);
    return 0;
  }
};

using WriteValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// Copy engine: cudaMemcpyAsync on the thread's own stream, to any address the
// device can reach (same GPU, peer GPU, pinned host). Completion is a stream
// memory write ordered after the copies, so the GPU sees it without a host
// round trip through cudaEventQuery.
class CopyEngineExecutor : public Executor {
 public:
  CopyEngineExecutor(int device, const char* src, char* dst, WriteValue32Fn write_value, bool use_batch)
      : src_(src), dst_(dst), write_value_(write_value), use_batch_(use_batch) {
    cudaSetDevice(device);
    status_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  }
  ~CopyEngineExecutor() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }
  int status() const { return status_; }

  int transfer(const Cmd* cmds, int n) override {
    if (use_batch_ && n > 1) {
      dsts_.resize(n); srcs_.resize(n); sizes_.resize(n);
      for (int i = 0; i < n; ++i) {
        dsts_[i] = dst_ + (uint64_t)cmds[i].dst8 * 8;
        srcs_[i] = src_ + (uint64_t)cmds[i].src8 * 8;
        sizes_[i] = cmd_size(cmds[i].w0);
      }
      cudaMemcpyAttributes attr = {};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t attr_idx = 0;
      cudaError_t e = cudaMemcpyBatchAsync(dsts_.data(), (const void* const*)srcs_.data(), sizes_.data(),
                                           (size_t)n, &attr, &attr_idx, 1, stream_);
      if (e == cudaSuccess) return 0;
      cudaGetLastError();  // batch API unsupported here: fall back to one call per command
      use_batch_ = false;
    }
    for (int i = 0; i < n; ++i) {
      cudaError_t e = cudaMemcpyAsync(dst_ + (uint64_t)cmds[i].dst8 * 8, src_ + (uint64_t)cmds[i].src8 * 8,
                                      cmd_size(cmds[i].w0), cudaMemcpyDefault, stream_);
      if (e != cudaSuccess) return (int)e;
    }
    return 0;
  }

  int signal(uint32_t* done_word, uint32_t value) override {
    return (int)write_value_((CUstream)stream_, (CUdeviceptr)done_word, value, 0);
  }

 private:
  const char* src_;
  char* dst_;
  WriteValue32Fn write_value_;
  bool use_batch_;
  cudaStream_t stream_ = nullptr;
  int status_ = 0;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
};

}  // namespace cbproxy
