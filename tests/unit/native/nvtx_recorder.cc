// A minimal NVTX tool for tests: loaded through NVTX_INJECTION64_PATH (as Nsight Systems'
// injection library is), it logs domain creation, pushes and pops to $NVTX_RECORDER_LOG,
// so a test sees exactly what a profiler would receive.
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <string>

static std::mutex mu;
static std::map<nvtxDomainHandle_t, std::string> names;
static long next_id = 1;

static void log_line(const std::string& s) {
  const char* path = getenv("NVTX_RECORDER_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", s.c_str());
  fclose(f);
}

static nvtxDomainHandle_t create(const char* name) {
  std::lock_guard<std::mutex> lock(mu);
  auto h = reinterpret_cast<nvtxDomainHandle_t>(next_id++);
  names[h] = name;
  log_line(std::string("create ") + name);
  return h;
}

static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(mu);
  std::string msg = a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?";
  unsigned long long payload = a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ? a->payload.ullValue : 0;
  log_line("push " + names[d] + " | " + msg + " | " + std::to_string(payload));
  return 0;
}

static int pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(mu);
  log_line("pop " + names[d]);
  return 0;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  auto cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&create);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
