// Enqueue one collective of the collectives family's `nccl` backend. The timed loops of
// timed_loop.cu, the per-op Python loop and the correctness check all call cb_nccl_enqueue, so the
// code that is timed is the code that is checked.
// NCCL is not linked here: the caller hands over the entry points of the libnccl it loaded, so
// the loop and the rest of commbench always use the same NCCL.
#include <cuda_runtime.h>
#include <cstddef>

typedef int (*nccl_send_t)(const void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_recv_t)(void*, size_t, int, int, void*, cudaStream_t);
typedef int (*nccl_group_t)(void);
// The shapes of NCCL's collective entry points (after send, recv, count, datatype).
typedef int (*nccl_plain_t)(const void*, void*, size_t, int, void*, cudaStream_t);            // + comm
typedef int (*nccl_reducing_t)(const void*, void*, size_t, int, int, void*, cudaStream_t);    // + redop
typedef int (*nccl_rooted_t)(const void*, void*, size_t, int, int, void*, cudaStream_t);      // + root
typedef int (*nccl_reduce_t)(const void*, void*, size_t, int, int, int, void*, cudaStream_t); // + redop, root

extern "C" {

// Field order and types are mirrored by commbench/comm/nccl_enqueue.py (ctypes).
struct cb_nccl_p2p {
  nccl_send_t send;
  nccl_recv_t recv;
  nccl_group_t group_start;
  nccl_group_t group_end;
};

struct cb_nccl_op {
  const cb_nccl_p2p* p2p;
  void* call;         // the op's NCCL entry point (ops.OPS[op].nccl_call); NULL: grouped send/recv
  int kind;           // the op's row in OPS_TABLE below
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
  // alltoallv: elements to and from each peer and where their blocks start (elements), one entry
  // per rank; NULL for every other op
  const size_t* send_counts;
  const size_t* send_displs;
  const size_t* recv_counts;
  const size_t* recv_displs;
};

}  // extern "C"

namespace {

const int kInvalidArgument = 4;  // ncclInvalidArgument

int plain(const cb_nccl_op& o, cudaStream_t s) {
  if (!o.call) return kInvalidArgument;
  return reinterpret_cast<nccl_plain_t>(o.call)(o.send, o.recv, o.count, o.dtype, o.comm, s);
}

int reducing(const cb_nccl_op& o, cudaStream_t s) {
  if (!o.call) return kInvalidArgument;
  return reinterpret_cast<nccl_reducing_t>(o.call)(o.send, o.recv, o.count, o.dtype, o.redop, o.comm, s);
}

int rooted(const cb_nccl_op& o, cudaStream_t s) {
  if (!o.call) return kInvalidArgument;
  return reinterpret_cast<nccl_rooted_t>(o.call)(o.send, o.recv, o.count, o.dtype, o.root, o.comm, s);
}

int reduce(const cb_nccl_op& o, cudaStream_t s) {
  if (!o.call) return kInvalidArgument;
  return reinterpret_cast<nccl_reduce_t>(o.call)(o.send, o.recv, o.count, o.dtype, o.redop, o.root, o.comm, s);
}

// Grouped ncclSend/ncclRecv: `count` elements to peer `to` from send + to * send_stride, from peer
// `from` into recv + from * recv_stride, for every peer (all = true) or one pair.
int grouped(const cb_nccl_op& o, cudaStream_t s, bool all, int to, int from, size_t stride) {
  const cb_nccl_p2p* p = o.p2p;
  int rc = p->group_start();
  for (int peer = 0; rc == 0 && peer < (all ? o.nranks : 1); ++peer) {
    const int dst = all ? peer : to, src = all ? peer : from;
    rc = p->send(o.send + dst * stride, o.count, o.dtype, dst, o.comm, s);
    if (rc == 0) rc = p->recv(o.recv + src * stride, o.count, o.dtype, src, o.comm, s);
  }
  int end = p->group_end();
  return rc ? rc : end;
}

int alltoall(const cb_nccl_op& o, cudaStream_t s) {
  if (o.call) return plain(o, s);  // ncclAlltoAll (NCCL >= 2.28)
  return grouped(o, s, true, 0, 0, o.count * o.elem_bytes);
}

// Grouped ncclSend/ncclRecv of a traffic matrix's row and column (NCCL has no alltoallv call); a
// peer with nothing to send or receive gets no call, as the matrix is the same on both sides.
int alltoallv(const cb_nccl_op& o, cudaStream_t s) {
  const cb_nccl_p2p* p = o.p2p;
  if (!o.send_counts || !o.recv_counts) return kInvalidArgument;
  int rc = p->group_start();
  for (int peer = 0; rc == 0 && peer < o.nranks; ++peer) {
    if (o.send_counts[peer])
      rc = p->send(o.send + o.send_displs[peer] * o.elem_bytes, o.send_counts[peer], o.dtype, peer, o.comm, s);
    if (rc == 0 && o.recv_counts[peer])
      rc = p->recv(o.recv + o.recv_displs[peer] * o.elem_bytes, o.recv_counts[peer], o.dtype, peer, o.comm, s);
  }
  int end = p->group_end();
  return rc ? rc : end;
}

int sendrecv(const cb_nccl_op& o, cudaStream_t s) {
  return grouped(o, s, false, (o.rank + 1) % o.nranks, (o.rank - 1 + o.nranks) % o.nranks, 0);
}

typedef int (*enqueue_t)(const cb_nccl_op&, cudaStream_t);
struct OpRow {
  const char* name;  // the op's name in commbench/families/collectives/ops.py
  enqueue_t enqueue;
};

// One row per op of ops.OPS (comm.nccl_enqueue checks the two tables name for name when it loads).
const OpRow OPS_TABLE[] = {
    {"all_reduce", reducing},
    {"all_gather", plain},
    {"reduce_scatter", reducing},
    {"alltoall", alltoall},
    {"alltoallv", alltoallv},
    {"broadcast", rooted},
    {"reduce", reduce},
    {"sendrecv", sendrecv},
    {"gather", rooted},
    {"scatter", rooted},
};
const int kOps = sizeof(OPS_TABLE) / sizeof(OPS_TABLE[0]);

}  // namespace

extern "C" {

// sizeof(cb_nccl_op), which comm.nccl_enqueue compares with its ctypes mirror when it loads.
size_t cb_nccl_op_bytes() { return sizeof(cb_nccl_op); }

// The name of op `kind` (its row in the table), NULL past the last one.
const char* cb_nccl_op_name(int kind) { return kind >= 0 && kind < kOps ? OPS_TABLE[kind].name : nullptr; }

int cb_nccl_enqueue(void* arg, cudaStream_t s) {
  cb_nccl_op* spec = static_cast<cb_nccl_op*>(arg);
  if (spec->kind < 0 || spec->kind >= kOps) return kInvalidArgument;
  cb_nccl_op local = *spec;  // this call's pointers (the spec keeps the base addresses)
  if (spec->steps > 1) {
    const size_t shift = spec->shift_bytes * (spec->calls % spec->steps);
    local.send += shift;
    local.recv += shift;
  }
  ++spec->calls;
  return OPS_TABLE[spec->kind].enqueue(local, s);
}

}  // extern "C"
