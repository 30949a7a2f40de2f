"""`commbench accept`: rules as data (``rules``), verdicts, JUnit and the report section
(``verdict``), and naming the slow host or link from per-rank samples (``localize``)."""
