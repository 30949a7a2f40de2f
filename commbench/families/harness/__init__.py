"""The harness family: control-plane barrier latency and deliberate hang/crash Cases."""
