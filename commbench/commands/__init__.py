"""The CLI layer: the commands that start runs (`run`, `nccl`, `accept`), their shared options and
the one way they load a suite and start a Run (start.py). cli.py wires them into the group; the
analysis floor below never starts a run."""
