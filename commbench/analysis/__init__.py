"""Everything that reads stored run folders and never needs a GPU: ``report`` (document model,
registered sections, HTML, Markdown, plots, tables), ``compare``, ``accept`` (rules, verdicts,
localization), ``commands`` (the click commands report, compare and accept), ``finish`` (what
`run` does with a stored run: plots, summary, report), and ``import_nccl_tests`` with its reader
``nccl_tests`` (other tools' outputs turned into run folders). analysis reads stored runs: it
imports profile, placement and runfolder, never launch; only the CLI layer (cli.py, commands/)
imports it."""
