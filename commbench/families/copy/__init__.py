"""The copy family: host-to-device, device-to-host, within a GPU and between GPUs, by the copy
engines and by an SM kernel, each against its link's bound (``family.py`` is the entry point)."""
