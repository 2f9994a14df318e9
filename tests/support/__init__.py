"""Harnesses of the test suite and the benchmarks, outside the wheel: a throwaway PostgreSQL cluster (``postgres``),
replicas on loopback and in network namespaces (``live``, ``hosts``), load generators (``load``, ``bulk``). Importable
as ``tests.support`` from the repository's root (pytest's ``pythonpath``; the benchmarks put the root on sys.path)."""
