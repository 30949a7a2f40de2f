"""Everything that reads stored run folders and never needs a GPU: ``report`` (document model,
HTML, Markdown, plots, tables), ``compare``, ``accept`` (rules, verdicts, localization),
``commands`` (the click commands report, compare and accept), and ``import_nccl_tests`` with
its reader ``nccl_tests`` (other tools' outputs turned into run folders)."""
