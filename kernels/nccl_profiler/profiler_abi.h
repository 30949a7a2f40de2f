// The NCCL profiler plugin interface, version 5, as this plugin sees it.
//
// Declared here from NCCL's documented ABI (ext-profiler/README.md of NCCL 2.28):
// the field order, types and enum values must match what NCCL passes, the names
// are ours. NCCL looks up the symbol `ncclProfiler_v5` in the library named by
// NCCL_PROFILER_PLUGIN and reads it as the table below. NCCL 2.28.3+ loads v5.
#ifndef COMMBENCH_NCCL_PROFILER_ABI_H
#define COMMBENCH_NCCL_PROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef __cplusplus
#include <stdbool.h>
#endif

// ncclResult_t is a C enum (int-sized); only init may return anything but success.
typedef int cbp_result;
enum { CBP_OK = 0, CBP_SYSTEM_ERROR = 2, CBP_INTERNAL_ERROR = 3 };

// Logger NCCL hands to init (level, subsystem flags, file, line, printf format).
typedef void (*cbp_logger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
enum { CBP_LOG_INFO = 3, CBP_LOG_SUBSYS_INIT = 1 };

// Event types: one bit each, also the bits of the activation mask set in init.
enum {
  CBP_EV_GROUP = 1 << 0,          // legacy (v4) group task
  CBP_EV_COLL = 1 << 1,           // one collective task; stop = enqueued
  CBP_EV_P2P = 1 << 2,            // one send or recv task; stop = enqueued
  CBP_EV_PROXY_OP = 1 << 3,       // proxy progress of one channel's network work
  CBP_EV_PROXY_STEP = 1 << 4,     // one network transfer of a proxy op
  CBP_EV_PROXY_CTRL = 1 << 5,     // proxy thread housekeeping
  CBP_EV_KERNEL_CH = 1 << 6,      // one channel of the kernel, with GPU timestamps
  CBP_EV_NET_PLUGIN = 1 << 7,     // network plugin's own events
  CBP_EV_GROUP_API = 1 << 8,      // ncclGroupStart/End, explicit or implicit
  CBP_EV_COLL_API = 1 << 9,       // the collective API call (ncclAllReduce, ...)
  CBP_EV_P2P_API = 1 << 10,       // ncclSend / ncclRecv call
  CBP_EV_KERNEL_LAUNCH = 1 << 11, // cudaLaunchKernel of a group
};

// State transitions passed to recordEventState (an int-sized C enum in NCCL).
enum {
  CBP_STATE_PROXY_OP_IN_PROGRESS = 19,
  CBP_STATE_STEP_SEND_GPU_WAIT = 8,
  CBP_STATE_STEP_SEND_PEER_WAIT = 20,
  CBP_STATE_STEP_SEND_WAIT = 9,
  CBP_STATE_STEP_RECV_WAIT = 10,
  CBP_STATE_STEP_RECV_FLUSH_WAIT = 11,
  CBP_STATE_STEP_RECV_GPU_WAIT = 12,
  CBP_STATE_KERNEL_CH_STOP = 22,
  CBP_STATE_GROUP_API_START_DONE = 23,
  CBP_STATE_GROUP_API_END_BEGIN = 24,
};

// What NCCL tells about an event when it starts it. `parent` is the handle this
// plugin returned for the parent event (or NULL); `type` selects the union member.
typedef struct {
  uint64_t type;
  void* parent;
  int rank;
  union {
    struct {
      int graph_captured;
      int depth;                 // 1: implicit group made by NCCL inside an API call
    } group_api;
    struct {
      const char* func;
      size_t count;
      const char* dtype;
      int root;
      void* stream;
      bool graph_captured;
    } coll_api;
    struct {
      const char* func;
      size_t count;
      const char* dtype;
      void* stream;
      bool graph_captured;
    } p2p_api;
    struct {
      void* stream;
    } kernel_launch;
    struct {
      uint64_t seq;              // per-communicator sequence number
      const char* func;
      const void* send_buf;
      void* recv_buf;
      size_t count;              // elements per rank, NCCL's own count
      int root;
      const char* dtype;         // "ncclFloat32", ...
      uint8_t n_channels;
      uint8_t n_warps;
      const char* algo;          // "Ring", "Tree", ...
      const char* proto;         // "LL", "LL128", "Simple"
      void* v4_group;
    } coll;
    struct {
      const char* func;
      void* buf;
      const char* dtype;
      size_t count;
      int peer;
      uint8_t n_channels;
      void* v4_group;
    } p2p;
    struct {
      pid_t pid;                 // process that made the op: the parent is only ours if it is us
      uint8_t channel;
      int peer;
      int n_steps;
      int chunk_bytes;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel;
      uint64_t gpu_start_ns;     // %globaltimer when the channel started
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net;
  };
} cbp_descr;

// Attributes that come with a state transition.
typedef union {
  struct {
    size_t bytes;                // bytes this step moved
  } proxy_step;
  struct {
    int appended;
  } proxy_ctrl;
  struct {
    void* data;
  } net;
  struct {
    uint64_t gpu_stop_ns;        // %globaltimer when the channel finished
  } kernel_ch;
} cbp_state_args;

// The table NCCL reads through the exported symbol `ncclProfiler_v5`.
typedef struct {
  const char* name;
  cbp_result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                     int n_nodes, int n_ranks, int rank, cbp_logger log);
  cbp_result (*start_event)(void* context, void** handle, cbp_descr* descr);
  cbp_result (*stop_event)(void* handle);
  cbp_result (*record_state)(void* handle, int state, cbp_state_args* args);
  cbp_result (*finalize)(void* context);
} cbp_plugin_v5;

#endif
