"""MoE expert-parallel dispatch/combine: routing, references, byte accounting, backends."""
