"""Reports, plots and tables built from stored run folders (no GPU needed)."""
