"""The names of the files ``train`` writes into ``--out``: the writer (train.outputs) and the
readers (plot, tests, code outside this repository) share them from here. Importing this
imports nothing."""

METRICS = "metrics.jsonl"  # one JSON object a line: config, step, epoch, ..., summary
MANIFEST = "manifest.json"  # environment, topology, status and exit status of the run
# The largest manifest.json a reader takes (ddpimg writes a few KiB).
MANIFEST_LIMIT = 16 << 20
# The longest metrics line a reader takes (ddpimg writes a few hundred bytes; a script's own
# scalars add some): a longer one ends what is read of the file.
MAX_METRICS_LINE = 1 << 20
