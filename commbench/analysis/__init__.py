"""Analysis of stored run folders: report, compare, accept, and imports from other tools."""
