"""``make bench`` and its siblings: admission, end-to-end, retention, peer and growth benchmarks
(docs/benchmarks.md; lab notes in bench/NOTES.md). Not a test suite."""
