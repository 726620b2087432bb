"""Harnesses of the tests and the benchmarks (`bench/` imports them too): nothing here ships in
the runtime package or the Airflow plugin."""
