// The native proxy: N host threads, one ring each, polling pinned memory and
// handing commands to an executor. Also usable without a GPU (host_only):
// then rings live in ordinary memory and host threads are the producers,
// which is how the ring logic is tested on CPU.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include "proxy_exec.cuh"
#include "proxy_ring.cuh"

namespace cbproxy {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spin briefly, then give the core away: with more threads than cores
// (CI machines) pure spinning starves the thread we are waiting for.
inline void backoff(uint32_t& spins) {
  if (++spins < 2048) cpu_relax(); else std::this_thread::yield();
}

struct EngineConfig {
  int device = 0;
  int host_only = 0;         // no CUDA at all: rings in malloc'd memory, ack executor
  uint32_t num_rings = 1;    // = proxy threads
  uint32_t num_slots = 4096;
  uint32_t num_producers = 1;
  int executor = 0;          // 0 ack, 1 copy engine
  int use_batch = 1;         // cudaMemcpyBatchAsync for drained batches
  uint32_t max_batch = 64;   // commands drained per poll
  const char* src = nullptr; // copy windows (device-accessible pointers)
  char* dst = nullptr;
  uint64_t stall_after = 0;  // fault injection: each thread stops consuming after this many
  uint64_t drop_every = 0;   // fault injection: each thread silently drops every Nth command
};

struct alignas(64) ThreadStats {
  uint64_t consumed = 0;
  uint64_t order_errors = 0;
  int exec_error = 0;
  int stalled = 0;
};

class Engine {
 public:
  explicit Engine(const EngineConfig& cfg) : cfg_(cfg) {}
  ~Engine() { destroy(); }

  // Allocate rings and start threads. Returns 0 or a cudaError_t / -1 for bad config.
  int create(WriteValue32Fn write_value) {
    const uint32_t S = cfg_.num_slots;
    if (S == 0 || (S & (S - 1)) || S > kMaxRingSlots || cfg_.num_rings == 0 ||
        cfg_.num_producers == 0 || cfg_.num_producers > kMaxProducers || cfg_.max_batch == 0)
      return -1;
    const size_t slot_bytes = sizeof(Cmd) * S * cfg_.num_rings;
    const size_t tail_bytes = sizeof(unsigned long long) * kTailStride * cfg_.num_rings;
    const size_t done_bytes = sizeof(uint32_t) * kDoneStride * cfg_.num_producers;
    host_.num_rings = dev_.num_rings = cfg_.num_rings;
    host_.num_slots = dev_.num_slots = S;
    if (cfg_.host_only) {
      host_.slots = (Cmd*)alloc_host(slot_bytes);
      host_.heads = (unsigned long long*)alloc_host(tail_bytes);
      host_.tails = (unsigned long long*)alloc_host(tail_bytes);
      host_.done = (uint32_t*)alloc_host(done_bytes);
      if (!host_.slots || !host_.heads || !host_.tails || !host_.done) return -1;
      dev_ = host_;
    } else {
      int e = 0;
      const unsigned flags = cudaHostAllocMapped | cudaHostAllocPortable;
      if (!e) e = (int)cudaHostAlloc((void**)&host_.slots, slot_bytes, flags);
      if (!e) e = (int)cudaHostAlloc((void**)&host_.tails, tail_bytes, flags);
      if (!e) e = (int)cudaHostAlloc((void**)&host_.done, done_bytes, flags);
      if (!e) e = (int)cudaMalloc((void**)&dev_.heads, tail_bytes);
      if (!e) e = (int)cudaMemset(dev_.heads, 0, tail_bytes);
      if (e) return e;
      memset(host_.slots, 0, slot_bytes);
      memset(host_.tails, 0, tail_bytes);
      memset(host_.done, 0, done_bytes);
      e = (int)cudaHostGetDevicePointer((void**)&dev_.slots, host_.slots, 0);
      if (!e) e = (int)cudaHostGetDevicePointer((void**)&dev_.tails, host_.tails, 0);
      if (!e) e = (int)cudaHostGetDevicePointer((void**)&dev_.done, host_.done, 0);
      if (e) return e;
      host_.heads = dev_.heads;  // never touched by the proxy
    }
    expect_pseq_.assign(cfg_.num_producers, 0);
    executed_.assign(cfg_.num_producers, 0);
    stats_.reset(new ThreadStats[cfg_.num_rings]);
    int prev_device = 0;
    if (!cfg_.host_only) cudaGetDevice(&prev_device);  // executors bind streams; restore the caller's device
    for (uint32_t r = 0; r < cfg_.num_rings; ++r) {
      std::unique_ptr<Executor> ex;
      if (cfg_.executor == 1 && !cfg_.host_only) {
        auto* ce = new CopyEngineExecutor(cfg_.device, cfg_.src, cfg_.dst, write_value, cfg_.use_batch != 0);
        ex.reset(ce);
        if (ce->status()) return ce->status();
      } else {
        ex.reset(new AckExecutor());
      }
      executors_.push_back(std::move(ex));
    }
    if (!cfg_.host_only) cudaSetDevice(prev_device);
    for (uint32_t r = 0; r < cfg_.num_rings; ++r) threads_.emplace_back([this, r] { loop(r); });
    return 0;
  }

  // Stop threads (they finish the batch in hand), wait for copies, free memory.
  void destroy() {
    stop_.store(1, std::memory_order_relaxed);
    for (auto& t : threads_) t.join();
    threads_.clear();
    executors_.clear();  // syncs and destroys the copy streams
    if (cfg_.host_only) {
      free(host_.slots); free(host_.heads); free(host_.tails); free(host_.done);
    } else {
      if (host_.slots) cudaFreeHost(host_.slots);
      if (host_.tails) cudaFreeHost(host_.tails);
      if (host_.done) cudaFreeHost(host_.done);
      if (dev_.heads) cudaFree(dev_.heads);
    }
    host_ = RingSet{};
    dev_ = RingSet{};
  }

  const RingSet& host_view() const { return host_; }
  const RingSet& dev_view() const { return dev_; }
  const EngineConfig& config() const { return cfg_; }
  uint32_t executed(uint32_t p) const { return __atomic_load_n(&executed_[p], __ATOMIC_ACQUIRE); }
  const ThreadStats& stats(uint32_t r) const { return stats_[r]; }

 private:
  static void* alloc_host(size_t bytes) {
    void* p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p) memset(p, 0, bytes);
    return p;
  }

  void loop(uint32_t r) {
    if (!cfg_.host_only) cudaSetDevice(cfg_.device);
    const uint32_t S = cfg_.num_slots;
    Cmd* ring = host_.slots + (size_t)r * S;
    unsigned long long* tail_word = host_.tails + (size_t)r * kTailStride;
    Executor& ex = *executors_[r];
    ThreadStats& st = stats_[r];
    std::vector<Cmd> batch(cfg_.max_batch);
    std::vector<uint32_t> touched;
    std::vector<uint8_t> is_touched(cfg_.num_producers, 0);
    uint64_t tail = 0;
    uint32_t idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      uint32_t n = 0;
      while (n < cfg_.max_batch) {
        const uint64_t t = tail + n;
        Cmd* s = &ring[t & (S - 1)];
        const uint32_t w0 = __atomic_load_n(&s->w0, __ATOMIC_ACQUIRE);
        if (cmd_tag(w0) != lap_tag(t, S)) break;
        batch[n] = Cmd{s->w1, s->src8, s->dst8, w0};
        ++n;
      }
      if (cfg_.stall_after && st.consumed + n > cfg_.stall_after) {
        n = (uint32_t)(cfg_.stall_after - st.consumed);  // a stalled proxy: stop consuming
        st.stalled = 1;
      }
      if (n == 0) { backoff(idle); continue; }
      idle = 0;
      uint32_t kept = 0;
      for (uint32_t i = 0; i < n; ++i) {
        if (cfg_.drop_every && (st.consumed + i + 1) % cfg_.drop_every == 0) continue;  // injected loss
        const uint32_t p = cmd_producer(batch[i].w1);
        if (p >= cfg_.num_producers) { ++st.order_errors; continue; }
        if (cmd_pseq(batch[i].w1) != (expect_pseq_[p] & 0xFFFFu)) ++st.order_errors;
        expect_pseq_[p] = cmd_pseq(batch[i].w1) + 1;
        __atomic_store_n(&executed_[p], executed_[p] + 1, __ATOMIC_RELEASE);
        if (!is_touched[p]) { is_touched[p] = 1; touched.push_back(p); }
        batch[kept++] = batch[i];
      }
      int e = kept ? ex.transfer(batch.data(), (int)kept) : 0;
      for (uint32_t p : touched) {
        // the copy engine writes through the device mapping, the ack executor from the CPU
        uint32_t* word = (cfg_.executor == 1 ? dev_.done : host_.done) + (size_t)p * kDoneStride;
        if (!e) e = ex.signal(word, executed_[p]);
        is_touched[p] = 0;
      }
      touched.clear();
      if (e && !st.exec_error) st.exec_error = e;
      tail += n;
      st.consumed += n;
      __atomic_store_n(tail_word, tail, __ATOMIC_RELEASE);
    }
  }

  EngineConfig cfg_;
  RingSet host_{}, dev_{};
  std::vector<uint32_t> expect_pseq_, executed_;
  std::unique_ptr<ThreadStats[]> stats_;
  std::vector<std::unique_ptr<Executor>> executors_;
  std::vector<std::thread> threads_;
  std::atomic<int> stop_{0};
};

}  // namespace cbproxy
