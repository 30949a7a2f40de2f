"""The training family: the communication of FSDP, distributed optimizer, TP/SP and context
parallel training steps, measured inside real steps (``family.py`` is the entry point)."""

from .family import FAMILY, strategy

__all__ = ["FAMILY", "strategy"]
