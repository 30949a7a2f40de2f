// NVSHMEM bootstrap over a unique id, driven from Python (commbench/comm/nvshmem.py).
//
// Rank 0 asks for a unique id, Python broadcasts its bytes over MPI, every rank
// initialises with it. nvshmemi_init_thread is called directly instead of the
// header's nvshmemx_init_attr because that wrapper exit()s on failure, and a
// transport that cannot come up must become a skipped Case, not a dead rank.
#include "nvshmem_common.cuh"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {

int cb_boot_uid_size() { return (int)sizeof(nvshmemx_uniqueid_t); }

int cb_boot_get_uid(void *out, int out_bytes) {
    if (out_bytes < (int)sizeof(nvshmemx_uniqueid_t)) return -1;
    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    int status = nvshmemx_get_uniqueid(&uid);
    memcpy(out, &uid, sizeof(uid));
    return status;
}

int cb_boot_init(const void *uid_bytes, int rank, int nranks) {
    nvshmemx_uniqueid_t uid;
    memcpy(&uid, uid_bytes, sizeof(uid));
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    int status = nvshmemx_set_attr_uniqueid_args(rank, nranks, &uid, &attr);
    if (status != 0) return status;
    nvshmemx_init_init_attr_ver_only(attr);
    int provided = 0;
    nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                  NVSHMEM_VENDOR_PATCH_VERSION};
    return nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID,
                                &attr, version);
}

int cb_boot_set_device(int device) { return (int)cudaSetDevice(device); }
int cb_boot_status() { return nvshmemx_init_status(); }
int cb_boot_my_pe() { return nvshmem_my_pe(); }
int cb_boot_n_pes() { return nvshmem_n_pes(); }
void cb_boot_finalize() { nvshmem_finalize(); }

void cb_boot_version(int *major, int *minor, int *patch) {
    *major = NVSHMEM_VENDOR_MAJOR_VERSION;
    *minor = NVSHMEM_VENDOR_MINOR_VERSION;
    *patch = NVSHMEM_VENDOR_PATCH_VERSION;
}

void cb_boot_name(char *out, int out_bytes) {
    char name[NVSHMEM_MAX_NAME_LEN];
    nvshmem_info_get_name(name);
    strncpy(out, name, out_bytes - 1);
    out[out_bytes - 1] = 0;
}

void *cb_boot_malloc(size_t size_bytes) { return nvshmem_malloc(size_bytes); }
void cb_boot_free(void *ptr) { nvshmem_free(ptr); }

// 1 when this PE reaches `pe`'s copy of `ptr` with loads and stores (P2P/NVLink), else 0.
int cb_boot_is_p2p(void *ptr, int pe) { return nvshmem_ptr(ptr, pe) != NULL; }

void cb_boot_barrier_all() { nvshmem_barrier_all(); }
void cb_boot_barrier_all_on_stream(void *stream) {
    nvshmemx_barrier_all_on_stream((cudaStream_t)stream);
}

}  // extern "C"
