"""Model presets and phases for the MoE family: shapes a suite can name instead of spelling out.

A preset fills the shape parameters it names; a key the suite writes itself
wins over the preset (``model: deepseek-v3`` with ``hidden: 2048`` runs DeepSeek-V3's
routing at hidden 2048). The phase sets the layer's token count per rank.
"""
from __future__ import annotations

# Shapes of the routed-expert layer of each model (from the models' published configs).
MODELS: dict[str, dict] = {
    # 256 routed experts, top-8, group-limited routing over 8 groups, 4 kept.
    "deepseek-v3": {"hidden": 7168, "experts": 256, "topk": 8, "intermediate": 2048,
                    "routing": "group", "n_group": 8, "topk_group": 4},
    "qwen3-235b-a22b": {"hidden": 4096, "experts": 128, "topk": 8, "intermediate": 1536},
    "mixtral-8x7b": {"hidden": 4096, "experts": 8, "topk": 2, "intermediate": 14336},
}
CUSTOM = "custom"   # no preset: the shape keys as written (or their defaults)
MODEL_CHOICES = (CUSTOM, *MODELS)

# Tokens per rank the layer runs when the suite does not set `tokens`:
# prefill is a large batch (normal kernels), decode a small one (low-latency kernels).
PHASE_TOKENS = {"prefill": 4096, "decode": 128}
PHASES = tuple(PHASE_TOKENS)


def resolve(params: dict, explicit: frozenset | set) -> dict:
    """Parameters with the model preset applied under the keys the suite wrote itself."""
    out = dict(params)
    preset = MODELS.get(out.get("model", CUSTOM), {})
    for key, value in preset.items():
        if key not in explicit and key in out:
            out[key] = value
    return out


def layer_tokens(params: dict) -> int:
    """Tokens per rank of one layer: `tokens` when set (> 0), else the phase's."""
    tokens = int(params.get("tokens") or 0)
    return tokens if tokens > 0 else PHASE_TOKENS[params.get("phase", "prefill")]
