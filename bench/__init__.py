"""``make bench`` and its siblings (docs/benchmarks.md, docs/scaling.md; lab notes in
bench/NOTES.md). Not a test suite.

A small core, and one script per bench over it:

- ``procs``: the processes a bench starts and stops (web, workers, peers' commands), their
  CPU and memory, and the noise of a phase (other CPU, I/O CPU);
- ``database``: scratch databases, bench projects, progress polled without committing, a
  batch of runs drained by one worker, the commits counted exactly and the sessions that are
  not the bench's;
- ``load``: the HTTP load generator and AwoooP's admission requests;
- ``report``: knobs from the environment, a bench's start and end, the machine, markdown;
- ``verdicts``: interleaved pairs, measured until enough are clean, and their noise;
- the benches: ``run`` (make bench), ``capacity``, ``growth``, ``peers``, ``retention``; and
  what they run: ``baseline_app``, ``raw_celery``, ``peers_dbos``, ``peers_procrastinate``,
  ``workflows``.
"""
