"""Where the slow part is, decided from measured numbers alone (no process is started here):
``blame`` (robust z over hosts, the node common to the slow pairs), ``search_plan`` (a placement:
search's planner: which groups of nodes the next wave measures) and ``search_judge`` (which group is
slow). The launch floor runs the waves these choose; accept and its simulator replay them."""
