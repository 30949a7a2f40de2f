# Sourced by the GPU scripts (session.sh, run_moe_layer.sh, run_profile.sh): the environment every
# GPU step runs in. Multicast kill switches: always set on our machines, forwarded to every rank
# (MPI below); never unset them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=${COMMBENCH_JIT_CACHE:-/tmp/cb-jit}
if ls .whl/*.whl >/dev/null 2>&1; then   # wheels brought along (the GPU machine has no network)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES
     -x PYTHONPATH -x PYTHONUNBUFFERED -x COMMBENCH_JIT_CACHE)
