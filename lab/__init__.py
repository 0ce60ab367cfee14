"""The laboratory: what the benchmarks, the training scripts and the tests use, never shipped in the wheel."""
