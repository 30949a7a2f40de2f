"""The harness family: control-plane barrier latency and deliberate hang/crash Cases."""

from .family import FAMILY

__all__ = ["FAMILY"]
