"""Running a suite: ``run`` (the Run: the Suite, its folder and run.json, the waves) when commbench
starts the ranks itself, ``inprocess`` when it already runs as the ranks of an MPI job, ``group``
(one launch group's attempts) and ``settle`` (what an attempt becomes: a pure function), ``prepare``
(what both share), ``supervise`` (one launch and its watchdog), ``mpiexec``/``srun`` (the launcher
argv), ``failure_hosts`` (the hosts a failed launch names in its rows), ``waves`` (launches on
disjoint hosts at once, the priced schedule) and ``search_run`` (placement: search, its waves chosen
as it runs by commbench.placement). The kill switches and the ranks' environment live in
``commbench.safety``. What happens to a stored run (plots, summary, report) is the caller's
``finish``: launch never imports analysis, and analysis never imports launch."""
