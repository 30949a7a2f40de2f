// NVTX ranges in the "commbench" domain for Python (ctypes), so Nsight Systems shows
// each Case and timed batch on the timeline beside NCCL's own "NCCL" domain.
//
// NVTX v3 is header-only: without a tool (nsys sets NVTX_INJECTION64_PATH) every call
// returns at once. commbench only loads this library when a tool is listening.
#include <nvtx3/nvToolsExt.h>

#include <stdint.h>

namespace {

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t handle = nvtxDomainCreateA("commbench");
  return handle;
}

}  // namespace

extern "C" {

// One range: message shown by the tool, payload (the Case's size in bytes) in its details.
__attribute__((visibility("default"))) int commbench_nvtx_push(const char* message, uint64_t payload,
                                                                uint32_t argb) {
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.colorType = NVTX_COLOR_ARGB;
  attr.color = argb;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = message;
  attr.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  attr.payload.ullValue = payload;
  return nvtxDomainRangePushEx(domain(), &attr);
}

__attribute__((visibility("default"))) int commbench_nvtx_pop(void) { return nvtxDomainRangePop(domain()); }

}  // extern "C"
