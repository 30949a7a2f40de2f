// JSON lines written by the commbench NCCL profiler (format: docs/profiling.md).
// Formatting happens under the context lock into an in-memory buffer; the file
// is written only at a mark (between Cases) or at finalize, never per event.
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "state.h"

namespace cbp {

int64_t now_ns() {
  // CLOCK_MONOTONIC: the clock Python's time.perf_counter_ns() reads on Linux,
  // so these stamps join the runner's own without conversion.
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

size_t dtype_bytes(const char* dtype) {
  if (dtype == NULL) return 0;
  static const struct { const char* name; size_t bytes; } sizes[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
      {"ncclFloat16", 2}, {"ncclBfloat16", 2}, {"ncclInt32", 4},      {"ncclUint32", 4},
      {"ncclFloat32", 4}, {"ncclInt64", 8},    {"ncclUint64", 8},     {"ncclFloat64", 8},
  };
  for (const auto& s : sizes)
    if (strcmp(dtype, s.name) == 0) return s.bytes;
  return 0;
}

void copy_name(char* dst, size_t cap, const char* src) {
  // Names go into JSON strings unescaped, so keep only characters that need no escaping.
  size_t n = 0;
  for (; src != NULL && *src != '\0' && n + 1 < cap; ++src) {
    char ch = *src;
    bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-' || ch == '.' || ch == ' ' || ch == ':' || ch == '=' || ch == '/';
    dst[n++] = plain ? ch : '?';
  }
  dst[n] = '\0';
}

static void add(std::string& s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n > 0) s.append(buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static void add_proxy(std::string& s, const ProxyOp* p) {
  add(s, "{\"ch\":%d,\"peer\":%d,\"send\":%d,\"nsteps\":%d,\"chunk\":%d,\"start_ns\":%lld,"
         "\"progress_ns\":%lld,\"stop_ns\":%lld,\"bytes\":%zu,\"steps\":%d,\"step_ns\":[",
      (int)p->channel, p->peer, p->is_send, p->n_steps, p->chunk_bytes, (long long)p->start_ns,
      (long long)p->progress_ns, (long long)p->stop_ns, p->bytes, p->steps_done);
  for (int i = 0; i < p->steps_kept; ++i) {
    const StepInfo& st = p->steps[i];
    add(s, "%s[%d,%lld,%lld,%zu]", i ? "," : "", st.step, (long long)st.start_ns, (long long)st.stop_ns,
        st.bytes);
  }
  s += "]}";
}

void emit_op(Context* c, OpRecord* op, bool complete) {
  std::string& s = c->out;
  bool coll = op->head.type == CBP_EV_COLL;
  add(s, "{\"kind\":\"%s\",\"comm\":\"%016llx\",\"rank\":%d,\"nranks\":%d,\"seq\":%llu,\"func\":\"%s\","
         "\"count\":%zu,\"dtype\":\"%s\",\"bytes\":%zu,\"%s\":%d,\"algo\":\"%s\",\"proto\":\"%s\","
         "\"nchannels\":%d,\"nwarps\":%d,\"complete\":%s,\"enq_ns\":[%lld,%lld]",
      coll ? "coll" : "p2p", (unsigned long long)c->comm_id, c->rank, c->n_ranks,
      (unsigned long long)op->seq, op->func, op->count, op->dtype, op->count * dtype_bytes(op->dtype),
      coll ? "root" : "peer", op->root_or_peer, op->algo, op->proto, (int)op->n_channels, (int)op->n_warps,
      complete ? "true" : "false", (long long)op->enq_start_ns, (long long)op->enq_stop_ns);
  if (op->api != NULL && op->api->gen == op->api_gen)
    add(s, ",\"api_ns\":[%lld,%lld]", (long long)op->api->start_ns, (long long)op->api->stop_ns);
  s += ",\"ch\":[";
  bool first = true;
  for (int i = 0; i < kMaxChannels; ++i) {
    const KernelCh& k = op->ch[i];
    if (!k.started || k.op_gen != op->gen) continue;
    add(s, "%s[%d,%llu,%llu,%lld,%lld]", first ? "" : ",", i, (unsigned long long)k.gpu_start_ns,
        (unsigned long long)(k.stopped ? k.gpu_stop_ns : 0), (long long)k.host_start_ns,
        (long long)(k.stopped ? k.host_stop_ns : 0));
    first = false;
  }
  add(s, "],\"proxy_total\":%d,\"proxy\":[", op->proxy_total);
  int kept = op->proxy_total < kMaxProxyPerOp ? op->proxy_total : kMaxProxyPerOp;
  first = true;
  for (int i = 0; i < kept; ++i) {
    const ProxyOp* p = op->proxies[i];
    if (p == NULL || p->op != op || p->op_gen != op->gen) continue;  // its slot went to a newer op
    if (!first) s += ",";
    add_proxy(s, p);
    first = false;
  }
  s += "]}\n";
  op->live = false;
  c->emitted++;
  if (!complete) c->partial++;
}

void emit_detached_proxy(Context* c, ProxyOp* p) {
  add(c->out, "{\"kind\":\"pxn\",\"comm\":\"%016llx\",\"rank\":%d,\"proxy\":", (unsigned long long)c->comm_id,
      p->rank);
  add_proxy(c->out, p);
  c->out += "}\n";
}

void emit_line_init(Context* c, int mask) {
  char host[128] = {0};
  char clean[128];
  gethostname(host, sizeof(host) - 1);
  copy_name(clean, sizeof(clean), host);
  add(c->out, "{\"kind\":\"init\",\"abi\":5,\"comm\":\"%016llx\",\"comm_name\":\"%s\",\"rank\":%d,\"nranks\":%d,"
              "\"nnodes\":%d,\"host\":\"%s\",\"pid\":%d,\"mask\":%d,\"mono_ns\":%lld,\"real_ns\":%lld}\n",
      (unsigned long long)c->comm_id, c->comm_name, c->rank, c->n_ranks, c->n_nodes, clean, (int)getpid(),
      mask, (long long)now_ns(), (long long)realtime_ns());
}

void emit_line_mark(Context* c, const char* label) {
  char clean[200];
  copy_name(clean, sizeof(clean), label);
  add(c->out, "{\"kind\":\"mark\",\"label\":\"%s\",\"t_ns\":%lld}\n", clean, (long long)now_ns());
}

void emit_line_finalize(Context* c) {
  add(c->out, "{\"kind\":\"finalize\",\"t_ns\":%lld,\"emitted\":%llu,\"partial\":%llu,\"late_events\":%llu,"
              "\"forced_reuse\":%llu}\n",
      (long long)now_ns(), (unsigned long long)c->emitted, (unsigned long long)c->partial,
      (unsigned long long)c->late_events, (unsigned long long)c->forced_reuse);
}

void write_out(Context* c) {
  if (c->file != NULL && !c->out.empty()) {
    fwrite(c->out.data(), 1, c->out.size(), c->file);
    fflush(c->file);
  }
  c->out.clear();
}

}  // namespace cbp
