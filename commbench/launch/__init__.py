"""Running a suite: ``orchestrate`` (plan, start each launch group, supervise, resume) when
commbench starts the ranks itself, ``inprocess`` when it already runs as the ranks of an MPI
job, ``prepare`` (what both share), ``supervise`` (one launch and its watchdog),
``mpiexec`` (the launcher argv) and ``failure_hosts`` (the hosts a failed launch names in its
rows), ``waves`` (launches on disjoint hosts at once, a wave's time limit, the priced schedule) and
``search_plan``, ``search_judge``, ``search_run`` (placement: search, its waves chosen as it runs).
The kill switches and the ranks' environment live in ``commbench.safety``. What happens to
a stored run (plots, summary, report) is the caller's ``finish``: launch never imports analysis,
which sits above it."""
