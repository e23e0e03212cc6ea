"""``make bench`` and its siblings (docs/benchmarks.md, docs/scaling.md; lab notes in
bench/NOTES.md). Not a test suite.

A small core, and one script per bench over it:

- ``procs``: processes, their CPU and memory, the noise of a phase;
- ``database``: scratch databases, projects, progress, commits counted exactly;
- ``load``: the HTTP load generator and AwoooP's admission requests;
- ``report``: knobs, a bench's start and end, the machine, markdown;
- ``verdicts``: interleaved pairs, measured until enough are clean;
- the benches: ``run`` (make bench), ``capacity``, ``growth``, ``peers``, ``retention``; and
  what they run: ``baseline_app``, ``raw_celery``, ``peers_dbos``, ``peers_procrastinate``,
  ``workflows``.
"""
