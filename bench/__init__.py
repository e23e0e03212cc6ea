"""``make bench``: admission and end-to-end benchmarks (DESIGN §8). Not a test suite."""
