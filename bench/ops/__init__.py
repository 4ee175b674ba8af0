"""One module per op: CASES for bench/run.py."""
