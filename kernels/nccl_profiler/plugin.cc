// commbench's NCCL profiler plugin (profiler ABI v5; docs/profiling.md).
//
// Per communicator and rank it records each collective and point-to-point task:
// host API and enqueue times, algorithm, protocol, channel and warp counts,
// bytes, per-channel kernel start/stop from the GPU timer, and the proxy ops
// and steps that moved data over the network. A task is written as one JSON
// line once it is enqueued and every kernel channel and proxy op it started has
// stopped. Records go to COMMBENCH_NCCL_PROFILE_DIR; without it the plugin asks
// NCCL for no events at all.
//
// Threads: NCCL calls in from the application thread (API, enqueue) and from
// its proxy thread (kernel channels, proxy ops and steps); one lock serialises
// them. Nothing is written to disk on the event path: commbench calls
// commbench_profiler_mark() between Cases, which writes what is done.
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "state.h"

using namespace cbp;

namespace {

std::mutex g_mu;
std::vector<Context*> g_contexts;

constexpr int kDefaultMask = CBP_EV_GROUP_API | CBP_EV_COLL_API | CBP_EV_P2P_API | CBP_EV_COLL | CBP_EV_P2P |
                             CBP_EV_PROXY_OP | CBP_EV_PROXY_STEP | CBP_EV_KERNEL_CH;

template <typename T>
bool in_pool(const std::vector<T>& pool, const void* p) {
  // Parents arrive as raw pointers; only ones inside our own pools are ever dereferenced.
  if (p == NULL || pool.empty()) return false;
  const char* lo = reinterpret_cast<const char*>(pool.data());
  const char* hi = lo + pool.size() * sizeof(T);
  const char* q = static_cast<const char*>(p);
  return q >= lo && q < hi && (q - lo) % sizeof(T) == 0;
}

template <typename T>
T* take(std::vector<T>& pool, size_t& next) {
  return &pool[next++ % pool.size()];
}

void maybe_complete(Context* c, OpRecord* op) {
  if (op->live && op->enq_stopped && op->ch_started == op->ch_stopped && op->ch_stopped >= op->n_channels &&
      op->proxy_open == 0)
    emit_op(c, op, true);
}

void force_emit_enqueued(Context* c) {
  for (OpRecord& op : c->ops)
    if (op.live && op.enq_stopped) emit_op(c, &op, false);
}

OpRecord* start_op(Context* c, cbp_descr* d) {
  OpRecord* op = take(c->ops, c->next_op);
  if (op->live) {  // a full turn of the pool and this one never finished: keep what it has
    emit_op(c, op, false);
    c->forced_reuse++;
  }
  bool coll = d->type == CBP_EV_COLL;
  op->head = {d->type, c};
  op->gen = ++c->next_gen;
  op->live = true;
  op->enq_stopped = false;
  op->enq_start_ns = now_ns();
  op->enq_stop_ns = 0;
  if (coll) {
    op->seq = d->coll.seq;
    copy_name(op->func, sizeof(op->func), d->coll.func);
    copy_name(op->dtype, sizeof(op->dtype), d->coll.dtype);
    copy_name(op->algo, sizeof(op->algo), d->coll.algo);
    copy_name(op->proto, sizeof(op->proto), d->coll.proto);
    op->count = d->coll.count;
    op->root_or_peer = d->coll.root;
    op->n_channels = d->coll.n_channels;
    op->n_warps = d->coll.n_warps;
  } else {
    op->seq = 0;
    copy_name(op->func, sizeof(op->func), d->p2p.func);
    copy_name(op->dtype, sizeof(op->dtype), d->p2p.dtype);
    op->algo[0] = op->proto[0] = '\0';
    op->count = d->p2p.count;
    op->root_or_peer = d->p2p.peer;
    op->n_channels = d->p2p.n_channels;
    op->n_warps = 0;
  }
  op->api = in_pool(c->apis, d->parent) ? static_cast<ApiEvent*>(d->parent) : NULL;
  op->api_gen = op->api ? op->api->gen : 0;
  op->ch_started = op->ch_stopped = 0;
  for (KernelCh& k : op->ch) k.started = false;
  op->proxy_open = op->proxy_total = 0;
  return op;
}

void* start_kernel_ch(Context* c, cbp_descr* d) {
  if (!in_pool(c->ops, d->parent)) return NULL;
  OpRecord* op = static_cast<OpRecord*>(d->parent);
  if (!op->live || d->kernel_ch.channel >= kMaxChannels) {
    c->late_events++;
    return NULL;
  }
  KernelCh* k = &op->ch[d->kernel_ch.channel];
  if (!k->started) {
    k->head = {CBP_EV_KERNEL_CH, c};
    k->op = op;
    k->op_gen = op->gen;
    k->channel = d->kernel_ch.channel;
    k->started = true;
    k->stopped = false;
    k->open = 0;
    k->gpu_start_ns = d->kernel_ch.gpu_start_ns;
    k->gpu_stop_ns = 0;
    k->host_start_ns = now_ns();
    k->host_stop_ns = 0;
    op->ch_started++;
  } else if (k->stopped) {  // another work item on a channel that had finished: it is running again
    k->stopped = false;
    op->ch_stopped--;
  }
  k->open++;
  return k;
}

void* start_proxy_op(Context* c, cbp_descr* d) {
  ProxyOp* p = take(c->proxies, c->next_proxy);
  *p = ProxyOp{};
  p->head = {CBP_EV_PROXY_OP, c};
  p->gen = ++c->next_gen;
  p->rank = d->rank;
  p->channel = d->proxy_op.channel;
  p->peer = d->proxy_op.peer;
  p->n_steps = d->proxy_op.n_steps;
  p->chunk_bytes = d->proxy_op.chunk_bytes;
  p->is_send = d->proxy_op.is_send;
  p->start_ns = now_ns();
  // PXN: a proxy serving another process's op gets that process's parent pointer.
  if (d->proxy_op.pid == getpid() && in_pool(c->ops, d->parent)) {
    OpRecord* op = static_cast<OpRecord*>(d->parent);
    if (op->live) {
      p->op = op;
      p->op_gen = op->gen;
      op->proxy_open++;
      if (op->proxy_total < kMaxProxyPerOp) op->proxies[op->proxy_total] = p;
      op->proxy_total++;
    }
  }
  return p;
}

void* start_proxy_step(Context* c, cbp_descr* d) {
  if (!in_pool(c->proxies, d->parent)) return NULL;
  ProxyOp* p = static_cast<ProxyOp*>(d->parent);
  ProxyStep* s = take(c->steps, c->next_step);
  s->head = {CBP_EV_PROXY_STEP, c};
  s->gen = ++c->next_gen;
  s->op = p;
  s->op_gen = p->gen;
  s->step = d->proxy_step.step;
  s->start_ns = now_ns();
  s->bytes = 0;
  return s;
}

cbp_result on_init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes, int n_ranks,
                   int rank, cbp_logger log) {
  *context = NULL;
  const char* dir = getenv("COMMBENCH_NCCL_PROFILE_DIR");
  if (dir == NULL || dir[0] == '\0') {
    *mask = 0;  // loaded but not asked for: no events, no cost
    return CBP_OK;
  }
  const char* mask_env = getenv("COMMBENCH_NCCL_PROFILE_MASK");
  int want = mask_env ? atoi(mask_env) : kDefaultMask;
  Context* c = new Context();
  c->comm_id = comm_id;
  c->rank = rank;
  c->n_ranks = n_ranks;
  c->n_nodes = n_nodes;
  copy_name(c->comm_name, sizeof(c->comm_name), comm_name);
  char host[64] = {0}, clean_host[64];
  gethostname(host, sizeof(host) - 1);
  copy_name(clean_host, sizeof(clean_host), host);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/nccl-%s-pid%d-comm%016llx-rank%d.jsonl", dir, clean_host, (int)getpid(),
           (unsigned long long)comm_id, rank);
  c->file = fopen(path, "a");
  if (c->file == NULL) {
    if (log) log(CBP_LOG_INFO, CBP_LOG_SUBSYS_INIT, __FILE__, __LINE__, "commbench profiler: cannot write %s", path);
    delete c;
    return CBP_SYSTEM_ERROR;  // NCCL then runs without the plugin
  }
  c->ops.resize(kOpPool);
  c->apis.resize(kApiPool);
  c->proxies.resize(kProxyPool);
  c->steps.resize(kStepPool);
  *mask = want;
  std::lock_guard<std::mutex> lock(g_mu);
  emit_line_init(c, want);
  write_out(c);
  g_contexts.push_back(c);
  if (log)
    log(CBP_LOG_INFO, CBP_LOG_SUBSYS_INIT, __FILE__, __LINE__,
        "commbench profiler: init comm %016llx rank %d/%d, mask 0x%x, records to %s", (unsigned long long)comm_id,
        rank, n_ranks, want, path);
  *context = c;
  return CBP_OK;
}

cbp_result on_start(void* context, void** handle, cbp_descr* d) {
  *handle = NULL;
  Context* c = static_cast<Context*>(context);
  if (c == NULL || d == NULL) return CBP_OK;
  std::lock_guard<std::mutex> lock(g_mu);
  switch (d->type) {
    case CBP_EV_GROUP_API:
    case CBP_EV_COLL_API:
    case CBP_EV_P2P_API: {
      ApiEvent* a = take(c->apis, c->next_api);
      a->head = {d->type, c};
      a->gen = ++c->next_gen;
      a->start_ns = now_ns();
      a->stop_ns = 0;
      *handle = a;
      break;
    }
    case CBP_EV_COLL:
    case CBP_EV_P2P: *handle = start_op(c, d); break;
    case CBP_EV_KERNEL_CH: *handle = start_kernel_ch(c, d); break;
    case CBP_EV_PROXY_OP: *handle = start_proxy_op(c, d); break;
    case CBP_EV_PROXY_STEP: *handle = start_proxy_step(c, d); break;
    default: break;  // proxy control, network plugin, kernel launch, legacy group: not recorded
  }
  return CBP_OK;
}

cbp_result on_stop(void* handle) {
  if (handle == NULL) return CBP_OK;
  std::lock_guard<std::mutex> lock(g_mu);
  Head* h = static_cast<Head*>(handle);
  Context* c = h->ctx;
  switch (h->type) {
    case CBP_EV_GROUP_API:
    case CBP_EV_COLL_API:
    case CBP_EV_P2P_API: static_cast<ApiEvent*>(handle)->stop_ns = now_ns(); break;
    case CBP_EV_COLL:
    case CBP_EV_P2P: {  // stop of a task means "enqueued"; it completes through its children
      OpRecord* op = static_cast<OpRecord*>(handle);
      if (!op->live || op->enq_stopped) break;
      op->enq_stopped = true;
      op->enq_stop_ns = now_ns();
      maybe_complete(c, op);
      break;
    }
    case CBP_EV_KERNEL_CH: {
      KernelCh* k = static_cast<KernelCh*>(handle);
      OpRecord* op = k->op;
      if (!op->live || op->gen != k->op_gen || k->open <= 0) {
        c->late_events++;
        break;
      }
      if (--k->open == 0) {
        k->stopped = true;
        k->host_stop_ns = now_ns();
        op->ch_stopped++;
        maybe_complete(c, op);
      }
      break;
    }
    case CBP_EV_PROXY_OP: {
      ProxyOp* p = static_cast<ProxyOp*>(handle);
      p->stop_ns = now_ns();
      if (p->op == NULL) {
        emit_detached_proxy(c, p);
      } else if (p->op->live && p->op->gen == p->op_gen) {
        p->op->proxy_open--;
        maybe_complete(c, p->op);
      } else {
        c->late_events++;
      }
      break;
    }
    case CBP_EV_PROXY_STEP: {
      ProxyStep* s = static_cast<ProxyStep*>(handle);
      ProxyOp* p = s->op;
      if (p->gen != s->op_gen) {
        c->late_events++;
        break;
      }
      if (p->steps_kept < kStepsKept) p->steps[p->steps_kept++] = StepInfo{s->step, s->start_ns, now_ns(), s->bytes};
      p->steps_done++;
      break;
    }
    default: break;
  }
  return CBP_OK;
}

cbp_result on_state(void* handle, int state, cbp_state_args* args) {
  if (handle == NULL) return CBP_OK;
  std::lock_guard<std::mutex> lock(g_mu);
  Head* h = static_cast<Head*>(handle);
  if (h->type == CBP_EV_KERNEL_CH && state == CBP_STATE_KERNEL_CH_STOP && args != NULL) {
    KernelCh* k = static_cast<KernelCh*>(handle);
    k->gpu_stop_ns = std::max(k->gpu_stop_ns, args->kernel_ch.gpu_stop_ns);
  } else if (h->type == CBP_EV_PROXY_OP && state == CBP_STATE_PROXY_OP_IN_PROGRESS) {
    ProxyOp* p = static_cast<ProxyOp*>(handle);
    if (p->progress_ns == 0) p->progress_ns = now_ns();
  } else if (h->type == CBP_EV_PROXY_STEP && args != NULL &&
             (state == CBP_STATE_STEP_SEND_WAIT || state == CBP_STATE_STEP_RECV_FLUSH_WAIT)) {
    // the transfer size is known once the data was handed to the network (send) or landed (receive)
    ProxyStep* s = static_cast<ProxyStep*>(handle);
    s->bytes += args->proxy_step.bytes;
    if (s->op->gen == s->op_gen) s->op->bytes += args->proxy_step.bytes;
  }
  return CBP_OK;
}

cbp_result on_finalize(void* context) {
  Context* c = static_cast<Context*>(context);
  if (c == NULL) return CBP_OK;
  std::lock_guard<std::mutex> lock(g_mu);
  force_emit_enqueued(c);
  emit_line_finalize(c);
  write_out(c);
  fclose(c->file);
  g_contexts.erase(std::remove(g_contexts.begin(), g_contexts.end(), c), g_contexts.end());
  delete c;
  return CBP_OK;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cbp_plugin_v5 ncclProfiler_v5 = {
    "commbench", on_init, on_start, on_stop, on_state, on_finalize,
};

// Called by commbench between Cases (through ctypes, on the library NCCL loaded):
// waits up to wait_ms for enqueued tasks to finish (the proxy thread reports
// kernel ends a little after the GPU), writes them (unfinished ones marked
// "complete": false), then a mark line. Returns the number of communicators.
__attribute__((visibility("default"))) int commbench_profiler_mark(const char* label, int wait_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      bool pending = false;
      for (Context* c : g_contexts)
        for (const OpRecord& op : c->ops) pending = pending || (op.live && op.enq_stopped);
      if (!pending || std::chrono::steady_clock::now() >= deadline) {
        for (Context* c : g_contexts) {
          force_emit_enqueued(c);
          emit_line_mark(c, label);
          write_out(c);
        }
        return (int)g_contexts.size();
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

__attribute__((visibility("default"))) int commbench_profiler_abi(void) { return 5; }

}  // extern "C"
