"""Top-level suite keys that state the node a suite needs, held against the machine by the preflight
(launch/preflight.py) before anything is launched (docs/suites.md, "The node a suite needs"):

- ``share_gpu: true`` lets ranks share a GPU when a launch has more ranks on a node than the node
  has GPUs (a correctness rehearsal: docs/rehearsal.md); without it they never do;
- ``node: {gpus: 8, gpu_model: H100, gpu_memory: 70GiB}``: GPUs each node must have (beyond what
  the launches' ranks per node already ask), a name every GPU's must contain (where a rule's floor
  belongs to one model), and memory each GPU must have free when the run starts.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import preview
from ..units import parse_size

SHARE_GPU_KEY = "share_gpu"
NODE_KEY = "node"
NODE_FIELDS = {"gpus": "GPUs each node must have (1-1024)",
               "gpu_model": "text every GPU's name must contain, e.g. H100 (case ignored)",
               "gpu_memory": "memory each GPU must have free when the run starts, e.g. 70GiB"}
MAX_NODE_GPUS = 1024


@dataclass(frozen=True)
class NodeSpec:
    """What a suite's ``node:`` states; None: not stated."""

    gpus: int | None = None
    gpu_model: str | None = None
    gpu_memory_bytes: int | None = None


def parse_node(value) -> NodeSpec:
    """``node:`` as a NodeSpec; ValueError names the field and what is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"a mapping with {', '.join(NODE_FIELDS)}, got {preview(value)}")
    unknown = [str(k) for k in value if k not in NODE_FIELDS]
    if unknown:
        raise ValueError(f"unknown field {preview(unknown[0])} (expected: {', '.join(NODE_FIELDS)})")
    gpus = value.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_NODE_GPUS):
        raise ValueError(f"gpus must be a whole number from 1 to {MAX_NODE_GPUS}, got {preview(gpus)}")
    model = value.get("gpu_model")
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > 64):
        raise ValueError(f"gpu_model must be a short non-empty text such as H100, got {preview(model)}")
    memory = value.get("gpu_memory")
    memory_bytes = None
    if memory is not None:
        try:
            memory_bytes = parse_size(memory)
        except ValueError as exc:
            raise ValueError(f"gpu_memory: {exc}") from None
        if memory_bytes <= 0:
            raise ValueError("gpu_memory must be more than 0 bytes")
    return NodeSpec(gpus=gpus, gpu_model=model.strip() if model else None, gpu_memory_bytes=memory_bytes)


def check_node_keys(raw, err) -> tuple[bool, NodeSpec]:
    """(share_gpu, node) of the suite mapping ``raw``; a problem (file:line: field) goes to ``err``."""
    share = raw.get(SHARE_GPU_KEY, False)
    if not isinstance(share, bool):
        err.add(raw.line_of(SHARE_GPU_KEY), SHARE_GPU_KEY, f"must be true or false, got {preview(share)}")
        share = False
    node = NodeSpec()
    if NODE_KEY in raw:
        try:
            node = parse_node(raw[NODE_KEY])
        except ValueError as exc:
            err.add(raw.line_of(NODE_KEY), NODE_KEY, str(exc))
    return share, node
