// Shared helpers for CUDA libraries that use NVSHMEM from commbench.
//
// Every shared library that links libnvshmem_device carries its own copy of
// the device state (nvshmemi_device_state_d). The host library fills a
// module's copy only after that module registered itself, which happens inside
// nvshmemi_init_thread. commbench_nvshmem_attach() does that registration for
// a library loaded after NVSHMEM was already initialised (by
// commbench/comm/nvshmem.py or by nvshmem4py): bootstrap is skipped because
// the host library is already up, and the module's device state is written.
// Link such libraries with -Xlinker -Bsymbolic so the call binds to this
// module's copy of the device-library code, not another library's.
#pragma once

#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>

#define CB_NS_OK 0
#define CB_NS_NOT_INITIALISED -100
#define CB_NS_TIMEOUT -101

// Register this module's device state with an NVSHMEM instance that is already initialised.
// `device` is the rank's GPU: each library carries its own CUDA runtime state,
// so it has to be told which device its launches go to.
static inline int commbench_nvshmem_attach(int device) {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return (int)err;
    if (nvshmemx_init_status() < NVSHMEM_STATUS_IS_INITIALIZED) return CB_NS_NOT_INITIALISED;
    int provided = 0;
    nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                  NVSHMEM_VENDOR_PATCH_VERSION};
    return nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, 0, NULL, version);
}

__device__ __forceinline__ uint64_t cb_globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spin until a local signal word reaches `expected`, giving up after timeout_ns
// so a missing peer turns into an error flag instead of a hung GPU.
__device__ __forceinline__ bool cb_wait_signal_ge(uint64_t *sig, uint64_t expected,
                                                  uint64_t timeout_ns, int *err) {
    const uint64_t start = cb_globaltimer_ns();
    while (nvshmem_signal_fetch(sig) < expected) {
        if (cb_globaltimer_ns() - start > timeout_ns) {
            atomicExch(err, 1);
            return false;
        }
    }
    return true;
}
