// What the commbench NCCL profiler keeps per communicator while NCCL runs.
//
// Every handle returned to NCCL points into a fixed pool of the communicator's
// context, so a handle stays valid memory for as long as NCCL may use it; a
// slot is reused only after a full turn of its pool, and a generation number
// tells a late event on a reused slot from a current one (late events are
// counted, never applied). All pools are allocated once in init.
#ifndef COMMBENCH_NCCL_PROFILER_STATE_H
#define COMMBENCH_NCCL_PROFILER_STATE_H

#include <mutex>
#include <stdio.h>
#include <string>
#include <vector>

#include "profiler_abi.h"

namespace cbp {

constexpr int kMaxChannels = 64;     // NCCL's channel limit
constexpr int kMaxProxyPerOp = 256;  // proxy ops remembered per collective (more are counted)
constexpr int kStepsKept = 16;       // per proxy op: the first steps in detail, the rest counted
constexpr size_t kOpPool = 1024;
constexpr size_t kApiPool = 4096;
constexpr size_t kProxyPool = 2048;
constexpr size_t kStepPool = 8192;

struct Context;

struct Head {
  uint64_t type;  // CBP_EV_*: stop/record dispatch on the first word of a handle
  Context* ctx;
};

// GroupApi, CollApi or P2pApi: the host side of an API call.
struct ApiEvent {
  Head head;
  uint64_t gen;
  int64_t start_ns, stop_ns;
};

struct OpRecord;

struct KernelCh {
  Head head;
  OpRecord* op;
  uint64_t op_gen;
  uint8_t channel;
  bool started, stopped;
  int open;  // starts minus stops: a channel may run more than one work item of the op
  uint64_t gpu_start_ns, gpu_stop_ns;   // GPU %globaltimer
  int64_t host_start_ns, host_stop_ns;  // when the proxy thread saw them (host monotonic clock)
};

struct StepInfo {
  int step;
  int64_t start_ns, stop_ns;
  size_t bytes;
};

struct ProxyOp {
  Head head;
  uint64_t gen;
  OpRecord* op;        // NULL for an op made by another process (PXN): never dereference theirs
  uint64_t op_gen;
  int rank;
  uint8_t channel;
  int peer, n_steps, chunk_bytes, is_send;
  int64_t start_ns, progress_ns, stop_ns;
  size_t bytes;
  int steps_done;
  int steps_kept;
  StepInfo steps[kStepsKept];
};

struct ProxyStep {
  Head head;
  uint64_t gen;
  ProxyOp* op;
  uint64_t op_gen;
  int step;
  int64_t start_ns;
  size_t bytes;
};

// One collective or point-to-point task, from enqueue to its last kernel channel.
struct OpRecord {
  Head head;
  uint64_t gen;
  bool live, enq_stopped;
  uint64_t seq;
  char func[32], dtype[24], algo[24], proto[16];
  size_t count;
  int root_or_peer;
  uint8_t n_channels, n_warps;
  int64_t enq_start_ns, enq_stop_ns;
  ApiEvent* api;
  uint64_t api_gen;
  int ch_started, ch_stopped;
  KernelCh ch[kMaxChannels];
  int proxy_open, proxy_total;
  ProxyOp* proxies[kMaxProxyPerOp];
};

struct Context {
  uint64_t comm_id;
  int rank, n_ranks, n_nodes;
  char comm_name[64];
  FILE* file;
  std::string out;  // finished records not yet written (written at a mark or at finalize)
  uint64_t next_gen;
  std::vector<OpRecord> ops;
  std::vector<ApiEvent> apis;
  std::vector<ProxyOp> proxies;
  std::vector<ProxyStep> steps;
  size_t next_op, next_api, next_proxy, next_step;
  uint64_t emitted, partial, late_events, forced_reuse;
};

// emit.cc
int64_t now_ns();
size_t dtype_bytes(const char* dtype);
void copy_name(char* dst, size_t cap, const char* src);
void emit_op(Context* c, OpRecord* op, bool complete);
void emit_detached_proxy(Context* c, ProxyOp* p);
void emit_line_init(Context* c, int mask);
void emit_line_mark(Context* c, const char* label);
void emit_line_finalize(Context* c);
void write_out(Context* c);

}  // namespace cbp

#endif
