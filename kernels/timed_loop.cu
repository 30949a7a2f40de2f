// Native timed loops (docs/metrics.md, "Timing"): the runner enters this library once per timed
// batch; the batch's ops are enqueued back to back from here, with CUDA events between them, so
// no interpreter cost sits between two ops (as in nccl-tests' own loop).
//
// An op is any C function `int enqueue(void* op, cudaStream_t stream)` returning 0 on success
// (e.g. cb_nccl_enqueue in nccl_enqueue.cu); the function pointer and its argument come from
// the library that owns the op.
#include <cuda_runtime.h>
#include <time.h>
#include <vector>

typedef int (*cb_enqueue_fn)(void* op, cudaStream_t stream);

// Return codes: 0 ok; > 0 a cudaError_t; -1 the op failed (its own code in *op_err, the index of
// the failing op in *failed_at).
namespace {

int enqueue_n(cb_enqueue_fn fn, void* op, cudaStream_t s, int n, int* op_err, int* failed_at) {
  for (int i = 0; i < n; ++i) {
    int rc = fn(op, s);
    if (rc != 0) {
      *op_err = rc;
      *failed_at = i;
      return -1;
    }
  }
  return 0;
}

long long monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // the clock of Python's time.perf_counter_ns()
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(int n) : ev(n, nullptr) {}
  int create() {
    for (auto& e : ev) {
      cudaError_t err = cudaEventCreate(&e);
      if (err != cudaSuccess) return err;
    }
    return 0;
  }
  ~Events() {
    for (auto e : ev)
      if (e) cudaEventDestroy(e);
  }
};

}  // namespace

extern "C" {

// Warm-up: n ops, then wait for them.
int cb_loop_enqueue(cb_enqueue_fn fn, void* op, cudaStream_t s, int n, int* op_err, int* failed_at) {
  int rc = enqueue_n(fn, op, s, n, op_err, failed_at);
  if (rc) return rc;
  return cudaStreamSynchronize(s);
}

// `iters` ops with an event between consecutive ops; out_us[i] = time of op i. With host_ns
// (iters + 1 slots, else NULL): host_ns[0] = CLOCK_MONOTONIC just after the first event was
// recorded on the idle stream (it fires then: the anchor of the event times on the host clock),
// host_ns[1 + i] = just before op i was enqueued (commbench.profile.skew puts ranks on one
// timeline with them; a clock read costs ~20 ns, far below an enqueue).
int cb_loop_events_stamped(cb_enqueue_fn fn, void* op, cudaStream_t s, int iters, float* out_us,
                           long long* host_ns, int* op_err, int* failed_at) {
  Events e(iters + 1);
  int rc = e.create();
  if (rc) return rc;
  if ((rc = cudaEventRecord(e.ev[0], s))) return rc;
  if (host_ns) host_ns[0] = monotonic_ns();
  for (int i = 0; i < iters; ++i) {
    if (host_ns) host_ns[1 + i] = monotonic_ns();
    rc = fn(op, s);
    if (rc != 0) {
      *op_err = rc;
      *failed_at = i;
      cudaStreamSynchronize(s);
      return -1;
    }
    if ((rc = cudaEventRecord(e.ev[i + 1], s))) return rc;
  }
  if ((rc = cudaEventSynchronize(e.ev[iters]))) return rc;
  for (int i = 0; i < iters; ++i) {
    float ms = 0.f;
    if ((rc = cudaEventElapsedTime(&ms, e.ev[i], e.ev[i + 1]))) return rc;
    out_us[i] = ms * 1e3f;
  }
  return 0;
}

int cb_loop_events(cb_enqueue_fn fn, void* op, cudaStream_t s, int iters, float* out_us, int* op_err,
                   int* failed_at) {
  return cb_loop_events_stamped(fn, op, s, iters, out_us, nullptr, op_err, failed_at);
}

// One event pair around `iters` back-to-back ops; *out_us = elapsed / iters (nccl-tests' default).
int cb_loop_batch(cb_enqueue_fn fn, void* op, cudaStream_t s, int iters, float* out_us, int* op_err,
                  int* failed_at) {
  Events e(2);
  int rc = e.create();
  if (rc) return rc;
  if ((rc = cudaEventRecord(e.ev[0], s))) return rc;
  rc = enqueue_n(fn, op, s, iters, op_err, failed_at);
  if (rc) {
    cudaStreamSynchronize(s);
    return rc;
  }
  if ((rc = cudaEventRecord(e.ev[1], s))) return rc;
  if ((rc = cudaEventSynchronize(e.ev[1]))) return rc;
  float ms = 0.f;
  if ((rc = cudaEventElapsedTime(&ms, e.ev[0], e.ev[1]))) return rc;
  *out_us = ms * 1e3f / iters;
  return 0;
}

// Capture `iters` ops into one CUDA graph. Capture runs on a private stream (the legacy default
// stream cannot be captured) ordered after `s`; *exec_out is launched later on `s`.
int cb_graph_capture(cb_enqueue_fn fn, void* op, cudaStream_t s, int iters, void** exec_out, int* op_err,
                     int* failed_at) {
  cudaStream_t cap = nullptr;
  cudaEvent_t ready = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int rc = cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking);
  if (rc) return rc;
  if (!(rc = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming)) && !(rc = cudaEventRecord(ready, s)) &&
      !(rc = cudaStreamWaitEvent(cap, ready, 0)) && !(rc = cudaStreamSynchronize(cap)) &&
      !(rc = cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal))) {
    int op_rc = enqueue_n(fn, op, cap, iters, op_err, failed_at);
    int end_rc = cudaStreamEndCapture(cap, &graph);
    rc = op_rc ? op_rc : end_rc;
    if (!rc) rc = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph) cudaGraphDestroy(graph);
  if (ready) cudaEventDestroy(ready);
  cudaStreamDestroy(cap);
  if (rc) return rc;
  *exec_out = exec;
  return 0;
}

// `launches` back-to-back launches of a captured graph of `iters` ops, one event pair around them:
// *out_us = elapsed / (launches * iters), the definition of nccl-tests -G <launches>.
int cb_graph_batch(void* exec, cudaStream_t s, int launches, int iters, float* out_us) {
  Events e(2);
  int rc = e.create();
  if (rc) return rc;
  if ((rc = cudaEventRecord(e.ev[0], s))) return rc;
  for (int l = 0; l < launches; ++l)
    if ((rc = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), s))) return rc;
  if ((rc = cudaEventRecord(e.ev[1], s))) return rc;
  if ((rc = cudaEventSynchronize(e.ev[1]))) return rc;
  float ms = 0.f;
  if ((rc = cudaEventElapsedTime(&ms, e.ev[0], e.ev[1]))) return rc;
  *out_us = ms * 1e3f / (static_cast<float>(launches) * iters);
  return 0;
}

int cb_graph_destroy(void* exec) { return cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)); }

const char* cb_cuda_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

// A native op made of up to CB_MAX_CALLS calls of C launchers `int f(a0, ..., a(n-1), cudaStream_t)`
// with fixed integer or pointer arguments (no floating point: they travel in other registers), e.g.
// our MoE dispatch and combine launchers, which Python otherwise calls through ctypes per op. Each
// argument is passed as a 64-bit integer, which the x86-64 and AArch64 C calling conventions give
// an int or a pointer parameter unchanged. Field order mirrored by commbench/measure/native_loop.py.
#define CB_MAX_ARGS 16
#define CB_MAX_CALLS 4
struct cb_call {
  void* fn;
  int nargs;
  unsigned long long args[CB_MAX_ARGS];
};
struct cb_calls {
  int n;
  cb_call call[CB_MAX_CALLS];
};

static int cb_call_one(const cb_call& c, cudaStream_t s) {
  typedef unsigned long long u;
  const u* a = c.args;
  switch (c.nargs) {
    case 0: return reinterpret_cast<int (*)(cudaStream_t)>(c.fn)(s);
    case 1: return reinterpret_cast<int (*)(u, cudaStream_t)>(c.fn)(a[0], s);
    case 2: return reinterpret_cast<int (*)(u, u, cudaStream_t)>(c.fn)(a[0], a[1], s);
    case 3: return reinterpret_cast<int (*)(u, u, u, cudaStream_t)>(c.fn)(a[0], a[1], a[2], s);
    case 4: return reinterpret_cast<int (*)(u, u, u, u, cudaStream_t)>(c.fn)(a[0], a[1], a[2], a[3], s);
    case 5:
      return reinterpret_cast<int (*)(u, u, u, u, u, cudaStream_t)>(c.fn)(a[0], a[1], a[2], a[3], a[4], s);
    case 6:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, cudaStream_t)>(c.fn)(a[0], a[1], a[2], a[3], a[4],
                                                                             a[5], s);
    case 7:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(a[0], a[1], a[2], a[3], a[4],
                                                                                a[5], a[6], s);
    case 8:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], s);
    case 9:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], s);
    case 10:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], s);
    case 11:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], s);
    case 12:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], s);
    case 13:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], s);
    case 14:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], s);
    case 15:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], s);
    case 16:
      return reinterpret_cast<int (*)(u, u, u, u, u, u, u, u, u, u, u, u, u, u, u, u, cudaStream_t)>(c.fn)(
          a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
          s);
    default: return int(cudaErrorInvalidValue);
  }
}

// The enqueue function of such an op: its calls in order; the first non-zero return ends it.
int cb_calls_enqueue(void* arg, cudaStream_t s) {
  const cb_calls* c = static_cast<const cb_calls*>(arg);
  if (c->n < 1 || c->n > CB_MAX_CALLS) return int(cudaErrorInvalidValue);
  for (int i = 0; i < c->n; ++i) {
    int rc = cb_call_one(c->call[i], s);
    if (rc) return rc;
  }
  return 0;
}

}  // extern "C"
