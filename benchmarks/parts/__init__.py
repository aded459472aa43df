"""The parts of ``nox -s bench``: one module each, each with a ``run(options)`` that returns
the rows of the table and a JSON record (see benchmarks/bench.py)."""
