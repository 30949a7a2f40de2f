"""Everything that reads stored run folders and never needs a GPU: ``report`` (document model,
HTML, Markdown, plots, tables), ``compare``, ``accept`` (rules, verdicts, localization) and
``commands`` (the click commands report, compare and accept)."""
