"""commbench: GPU communication benchmarks with checked results."""

__version__ = "0.1.0"
