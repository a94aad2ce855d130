"""Experiments: test an agent on your own cases (see results.py for the shared shapes)."""
