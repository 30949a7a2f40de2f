// Enqueue one nccl-tests collective from native code (for the timed loops of timed_loop.cu).
// NCCL is not linked here: the caller hands over the entry points of the libnccl it loaded, so
// the loop and the rest of commbench always use the same NCCL.
#include <cuda_runtime.h>
#include <cstddef>

typedef int (*nccl_allreduce_t)(const void*, void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_allgather_t)(const void*, void*, size_t, int, void*, cudaStream_t);
typedef int (*nccl_reducescatter_t)(const void*, void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_broadcast_t)(const void*, void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_reduce_t)(const void*, void*, size_t, int, int, int, void*, cudaStream_t);
typedef int (*nccl_send_t)(const void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_recv_t)(void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_group_t)(void);
typedef int (*nccl_alltoall_t)(const void*, void*, size_t, int, void*, cudaStream_t);

extern "C" {

// Field order and types are mirrored by commbench/families/collectives/nccl_native.py (ctypes).
struct cb_nccl_api {
  nccl_allreduce_t all_reduce;
  nccl_allgather_t all_gather;
  nccl_reducescatter_t reduce_scatter;
  nccl_broadcast_t broadcast;
  nccl_reduce_t reduce;
  nccl_send_t send;
  nccl_recv_t recv;
  nccl_group_t group_start;
  nccl_group_t group_end;
  nccl_alltoall_t all_to_all;  // NULL before NCCL 2.28: grouped send/recv instead
};

enum cb_nccl_op_kind { CB_ALL_REDUCE = 0, CB_ALL_GATHER, CB_REDUCE_SCATTER, CB_BROADCAST, CB_REDUCE,
                       CB_ALLTOALL, CB_SENDRECV };

struct cb_nccl_op {
  const cb_nccl_api* api;
  int kind;
  const char* send;
  char* recv;
  size_t count;       // NCCL's count argument (per-rank count for gather/scatter, per-peer for alltoall)
  size_t elem_bytes;
  int dtype;
  int redop;
  int root;
  int rank;
  int nranks;
  void* comm;
  // Buffer rotation, as nccl-tests' startColl: call k uses send + shift and recv + shift with
  // shift = shift_bytes * (k % steps), so consecutive iterations never find their data in L2
  // (steps = 1: the same buffers every call). `calls` counts the calls made so far.
  size_t shift_bytes;
  size_t steps;
  size_t calls;
};

int cb_nccl_enqueue(void* arg, cudaStream_t s) {
  cb_nccl_op* spec = static_cast<cb_nccl_op*>(arg);
  cb_nccl_op local = *spec;  // this call's pointers (the spec keeps the base addresses)
  const cb_nccl_op* o = &local;
  if (spec->steps > 1) {
    const size_t shift = spec->shift_bytes * (spec->calls % spec->steps);
    local.send += shift;
    local.recv += shift;
  }
  ++spec->calls;
  const cb_nccl_api* a = o->api;
  switch (o->kind) {
    case CB_ALL_REDUCE: return a->all_reduce(o->send, o->recv, o->count, o->dtype, o->redop, o->comm, s);
    case CB_ALL_GATHER: return a->all_gather(o->send, o->recv, o->count, o->dtype, o->comm, s);
    case CB_REDUCE_SCATTER:
      return a->reduce_scatter(o->send, o->recv, o->count, o->dtype, o->redop, o->comm, s);
    case CB_BROADCAST: return a->broadcast(o->send, o->recv, o->count, o->dtype, o->root, o->comm, s);
    case CB_REDUCE: return a->reduce(o->send, o->recv, o->count, o->dtype, o->redop, o->root, o->comm, s);
    case CB_ALLTOALL: {
      if (a->all_to_all) return a->all_to_all(o->send, o->recv, o->count, o->dtype, o->comm, s);
      const size_t chunk = o->count * o->elem_bytes;
      int rc = a->group_start();
      for (int peer = 0; rc == 0 && peer < o->nranks; ++peer) {
        rc = a->send(o->send + peer * chunk, o->count, o->dtype, peer, o->comm, s);
        if (rc == 0) rc = a->recv(o->recv + peer * chunk, o->count, o->dtype, peer, o->comm, s);
      }
      int end = a->group_end();
      return rc ? rc : end;
    }
    case CB_SENDRECV: {
      int rc = a->group_start();
      if (rc == 0) rc = a->send(o->send, o->count, o->dtype, (o->rank + 1) % o->nranks, o->comm, s);
      if (rc == 0) rc = a->recv(o->recv, o->count, o->dtype, (o->rank - 1 + o->nranks) % o->nranks, o->comm, s);
      int end = a->group_end();
      return rc ? rc : end;
    }
    default: return 4;  // ncclInvalidArgument
  }
}

}  // extern "C"
