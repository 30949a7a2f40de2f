// Host helpers for peer-visible device memory over CUDA IPC: raw allocations
// (torch's caching allocator hands out sub-blocks, which IPC cannot address by
// themselves), handle export/import, zeroing and copies.
#include <cuda_runtime.h>
#include <string.h>

// Zeroed before its IPC handle is exported: a peer's first signal must not be
// overwritten by a late memset.
extern "C" int cb_ipc_malloc(void** ptr, size_t bytes) {
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e != cudaSuccess) return int(e);
  e = cudaMemset(*ptr, 0, bytes);
  if (e != cudaSuccess) return int(e);
  return int(cudaDeviceSynchronize());
}

// Zero `bytes` at `ptr` and wait for it (used on NVSHMEM workspaces reused across Cases).
extern "C" int cb_ipc_zero(void* ptr, size_t bytes) {
  cudaError_t e = cudaMemset(ptr, 0, bytes);
  if (e != cudaSuccess) return int(e);
  return int(cudaDeviceSynchronize());
}

extern "C" int cb_ipc_free(void* ptr) { return int(cudaFree(ptr)); }

extern "C" int cb_ipc_handle_size() { return int(sizeof(cudaIpcMemHandle_t)); }

extern "C" int cb_ipc_get(void* ptr, char* handle_out) {
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, ptr);
  if (e == cudaSuccess) memcpy(handle_out, &h, sizeof(h));
  return int(e);
}

extern "C" int cb_ipc_open(const char* handle, void** ptr) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof(h));
  return int(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess));
}

extern "C" int cb_ipc_close(void* ptr) { return int(cudaIpcCloseMemHandle(ptr)); }

extern "C" int cb_ipc_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  return int(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

extern "C" const char* cb_ipc_error_string(int code) {
  return cudaGetErrorString(cudaError_t(code));
}
