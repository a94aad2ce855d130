"""The benchmarks (scripts, run from the repository root; see README.md). Not tests."""
