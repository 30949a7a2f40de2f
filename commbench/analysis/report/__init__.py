"""Reports, plots and tables built from stored run folders (no GPU needed): ``build`` writes every
registered section (``sections/``) that applies to the rows into a ``document``, rendered by
``html`` and ``markdown``."""
