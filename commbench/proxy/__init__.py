"""CPU-proxy vs GPU-direct transfers: native bindings and per-Case state for the proxy family."""
