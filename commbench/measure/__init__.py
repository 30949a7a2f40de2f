"""The measurement protocol: timing modes and the native timed loops (DESIGN section 5)."""
