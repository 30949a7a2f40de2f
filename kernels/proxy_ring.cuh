// Command ring shared by GPU (or host) producers and CPU proxy threads.
//
// One ring per proxy thread. Slots live in pinned host memory so the proxy
// polls its own memory; the reservation counter (head) lives wherever the
// producers are (device memory for GPU producers), the consumer's progress
// (tail) in host memory. A slot is published by writing word 0 last: it holds
// an 8-bit lap tag, so the consumer can tell a fresh command from the
// previous lap's without ever clearing slots.
#pragma once
#include <cstdint>

#ifndef __CUDACC__
#define __host__
#define __device__
#endif

namespace cbproxy {

enum Op : uint32_t { kOpAck = 0, kOpCopy = 1 };

constexpr uint32_t kMaxProducers = 4096;                 // 12-bit producer id
constexpr uint64_t kMaxCmdBytes = ((1ull << 24) - 1) * 8;  // 24-bit size in 8-byte units
constexpr uint32_t kMaxRingSlots = 1u << 15;               // lap tag must change between laps
constexpr int kTailStride = 8;   // u64 per tail: one cache line each, no false sharing
constexpr int kDoneStride = 16;  // u32 per completion word

// How a producer publishes a slot (the tag in word 0 makes it visible to the proxy).
enum Publish : int {
  kPublishFence = 0,    // body, __threadfence_system, then word 0
  kPublishRelease = 1,  // body, then word 0 with a system-scope release store
  kPublishVec16 = 2,    // the whole 16-byte command, tag included, in one vector store
};

// 16 bytes. w0 = tag(8) | size/8 (24); w1 = op(4) | producer(12) | pseq(16);
// src8/dst8 = offsets into the source/destination windows in 8-byte units. The tag word sits
// last in the slot: a write that lands in address order (as PCIe writes into a cache line do)
// shows the tag only after the rest of the command, as NIC completion entries keep their
// owner bit in the last byte.
struct alignas(16) Cmd {
  uint32_t w1, src8, dst8, w0;
};

__host__ __device__ inline uint32_t lap_tag(uint64_t ticket, uint32_t slots) {
  return (uint32_t)((ticket / slots + 1) & 0xFFu);
}
__host__ __device__ inline uint32_t cmd_tag(uint32_t w0) { return w0 & 0xFFu; }
__host__ __device__ inline uint64_t cmd_size(uint32_t w0) { return (uint64_t)(w0 >> 8) * 8; }
__host__ __device__ inline uint32_t cmd_op(uint32_t w1) { return w1 & 0xFu; }
__host__ __device__ inline uint32_t cmd_producer(uint32_t w1) { return (w1 >> 4) & 0xFFFu; }
__host__ __device__ inline uint32_t cmd_pseq(uint32_t w1) { return w1 >> 16; }

__host__ __device__ inline Cmd make_cmd(uint32_t op, uint32_t producer, uint32_t pseq,
                                        uint64_t size_bytes, uint64_t src_off, uint64_t dst_off) {
  Cmd c;
  c.w0 = (uint32_t)(size_bytes >> 3) << 8;  // tag added at publish time
  c.w1 = (op & 0xFu) | ((producer & 0xFFFu) << 4) | ((pseq & 0xFFFFu) << 16);
  c.src8 = (uint32_t)(src_off >> 3);
  c.dst8 = (uint32_t)(dst_off >> 3);
  return c;
}

// Pointers as seen by the producers (device pointers for GPU producers).
struct RingSet {
  Cmd* slots;                 // num_rings * num_slots
  unsigned long long* heads;  // num_rings * kTailStride, producers' reservation counters
  unsigned long long* tails;  // num_rings * kTailStride, consumer progress (host memory)
  uint32_t* done;             // num_producers * kDoneStride, completions per producer
  uint32_t num_rings;
  uint32_t num_slots;         // power of two
};

// Why a bounded wait gave up (first error wins; 0 = fine).
enum ErrorCode : int {
  kOk = 0,
  kErrSlotTimeout = 1,     // ring stayed full: proxy stalled or dead
  kErrCompletionTimeout = 2,  // commands posted, completions never came
  kErrAborted = 3,         // another producer failed first
};

}  // namespace cbproxy
