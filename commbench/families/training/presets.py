"""Model presets: the transformer shapes a `model:` key in a suite stands for.

Values are the published configurations (hidden size, MLP size, attention and
key/value heads, layer count). A suite's explicit `hidden`, `ffn`, `heads`,
`kv_heads` or `head_dim` overrides the preset's value; `tiny` is for CPU runs.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelPreset:
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    model_layers: int   # layers of the whole model (a Case measures `layers` of them)


PRESETS: dict[str, ModelPreset] = {
    "llama3-8b": ModelPreset(hidden=4096, ffn=14336, heads=32, kv_heads=8, model_layers=32),
    "llama3-70b": ModelPreset(hidden=8192, ffn=28672, heads=64, kv_heads=8, model_layers=80),
    "llama3-405b": ModelPreset(hidden=16384, ffn=53248, heads=128, kv_heads=8, model_layers=126),
    "qwen2.5-7b": ModelPreset(hidden=3584, ffn=18944, heads=28, kv_heads=4, model_layers=28),
    "qwen2.5-72b": ModelPreset(hidden=8192, ffn=29568, heads=64, kv_heads=8, model_layers=80),
    "mistral-7b": ModelPreset(hidden=4096, ffn=14336, heads=32, kv_heads=8, model_layers=32),
    "tiny": ModelPreset(hidden=64, ffn=128, heads=4, kv_heads=2, model_layers=2),
}
