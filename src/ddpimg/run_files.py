"""The names of the files ``train`` writes into ``--out``: the writer (train.outputs) and the
readers (plot, tests, code outside this repository) share them from here. Importing this
imports nothing."""

METRICS = "metrics.jsonl"  # one JSON object a line: config, step, epoch, ..., summary
MANIFEST = "manifest.json"  # environment, topology, status and exit status of the run
