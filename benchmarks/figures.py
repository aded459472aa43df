"""The figures docs/performance.md shows, drawn from the benchmark's JSON in
benchmarks/results (``nox -s bench`` redraws them after writing its results):

* ``performance-throughput.png``: ddpimg's training throughput over the tutorial-style
  reference loop's, per model: the ``ab`` part on the CPU (median and range of the rounds),
  the GPU runbook's ``bench-*`` steps on a GPU;
* ``performance-startup.png``: ``train mnist --max-steps 1`` from the ``startup`` part's
  breakdown, phase by phase, each side of the run (before and after a change, as typed and
  with its evaluation cut to 64 samples), against ``python -c 'import torch'``;
* ``performance-scaling.png``: samples/s on 1 and 2 local ranks (the ``overhead`` part's
  weak scaling), against linear scaling.

Each figure takes the newest results that hold its part (by the time the part started); a
figure whose part is in no file is left as it is, with a line saying so.

    python benchmarks/figures.py [--results benchmarks/results] [--images docs/images]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parts.startup import GOAL_OVER_TORCH_S

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
IMAGES = HERE.parent / "docs" / "images"
THROUGHPUT = "performance-throughput.png"
STARTUP = "performance-startup.png"
SCALING = "performance-scaling.png"
# The ab part's models as the page names them.
AB_MODELS = {"mnist": "MNIST CNN", "gpt-tiny": "GPT-tiny", "resnet18-64px": "ResNet-18, 64 px"}
# The runbook's GPU steps that compare ddpimg with the reference loop: (ddpimg, reference).
GPU_STEPS = {
    "bench-resnet50": ("ResNet-50, bf16", "ddpimg_images_per_s", "reference_images_per_s"),
}
SIDES_PART = "startup"
Document = Mapping[str, Any]


def documents(results: Path) -> list[Document]:
    """Every results file in ``results`` that parses, bench's and the runbook's alike."""
    found: list[Document] = []
    for path in sorted(results.glob("*.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(document, dict):
            found.append(document | {"file": path.name})
    return found


def newest_part(docs: Sequence[Document], part: str) -> tuple[Document, Document] | None:
    """(the file, its part) of the newest run of ``part`` with a record, or None."""
    runs = [
        (doc, doc["parts"][part])
        for doc in docs
        if isinstance(doc.get("parts"), dict)
        and isinstance(doc["parts"].get(part), dict)
        and doc["parts"][part].get("record")
    ]
    return max(runs, key=lambda run: str(run[1].get("started", ""))) if runs else None


def gpu_ratios(docs: Sequence[Document]) -> list[tuple[str, float, str]]:
    """(model, ddpimg / reference, machine) of the newest passing run of each GPU step."""
    best: dict[str, tuple[str, tuple[str, float, str]]] = {}
    for doc in docs:
        if doc.get("runbook") is None:
            continue
        gpu = ((doc.get("device") or {}).get("gpu") or {}).get("name", "GPU")
        for step in doc.get("steps", []):
            spec = GPU_STEPS.get(step.get("name"))
            record = step.get("record") or {}
            if spec is None or not record.get(spec[2]):
                continue
            label, ours, theirs = spec
            entry = (label, record[ours] / record[theirs], str(gpu).replace("NVIDIA ", ""))
            started = str(doc.get("started", ""))
            if step["name"] not in best or started > best[step["name"]][0]:
                best[step["name"]] = (started, entry)
    return [entry for _, entry in best.values()]


def throughput(figure: Figure, docs: Sequence[Document]) -> bool:
    """Bars of ddpimg's steps/s (or images/s) over the reference loop's; False: no data."""
    found = newest_part(docs, "ab")
    bars: list[tuple[str, float, float, float]] = []
    machine = ""
    if found is not None:
        doc, part = found
        machine = f"{doc['machine'].get('cpus', '?')}-core CPU"
        for model, name in AB_MODELS.items():
            ratio = part["record"].get(model, {}).get("steps_per_s_ratio")
            if ratio:
                bars.append((f"{name}\n{machine}", ratio["median"], ratio["min"], ratio["max"]))
    for label, ratio, gpu in gpu_ratios(docs):
        bars.append((f"{label}\n{gpu}", ratio, ratio, ratio))
    if not bars:
        return False
    axes = figure.add_subplot()
    names = [bar[0] for bar in bars]
    medians = [bar[1] for bar in bars]
    errors = [[bar[1] - bar[2] for bar in bars], [bar[3] - bar[1] for bar in bars]]
    axes.barh(names, medians, xerr=errors, color="C0", capsize=4)
    axes.axvline(1.0, color="gray", linestyle=":")
    for index, bar in enumerate(bars):
        axes.text(bar[3] + 0.03, index, f"{bar[1]:.2f}x", va="center")
    axes.invert_yaxis()
    axes.set_xlim(0, max(bar[3] for bar in bars) * 1.25)
    axes.set(
        xlabel="ddpimg's throughput / the tutorial-style loop's (same model, batch, data)",
        title="Training throughput against the reference loops (bars: median; lines: range)",
    )
    axes.grid(True, axis="x", alpha=0.3)
    return True


def startup(figure: Figure, docs: Sequence[Document]) -> bool:
    """Stacked bars of each side's median seconds per phase, torch's import marked."""
    found = newest_part(docs, SIDES_PART)
    if found is None or not found[1]["record"].get("breakdown"):
        return False
    breakdown = found[1]["record"]["breakdown"]
    sides = {name: side for name, side in breakdown.items() if isinstance(side, dict)}
    phases = [key for key in next(iter(sides.values()))["median_s"] if key not in _TOTALS]
    axes = figure.add_subplot()
    left = [0.0] * len(sides)
    for index, phase in enumerate(phases):
        widths = [side["median_s"][phase] for side in sides.values()]
        axes.barh(list(sides), widths, left=left, label=phase, color=f"C{index % 10}")
        left = [start + width for start, width in zip(left, widths, strict=True)]
    torch_s = statistics.median(breakdown["torch_s"])
    axes.axvline(
        torch_s, color="black", linestyle=":", label=f"python -c 'import torch' ({torch_s:.2f} s)"
    )
    goal = f"the goal: {GOAL_OVER_TORCH_S:g} s over it"
    axes.axvline(torch_s + GOAL_OVER_TORCH_S, color="gray", linestyle="--", label=goal)
    # Each phase's median: their sum is not the whole process's median, which is written.
    for index, (total, side) in enumerate(zip(left, sides.values(), strict=True)):
        whole = side["median_s"].get("whole process", total)
        axes.text(total + 0.1, index, f"whole: {whole:.1f} s", va="center")
    axes.set_xlim(0, max(left) * 1.18)
    axes.invert_yaxis()
    axes.set(
        xlabel="seconds (median of the rounds)",
        title=f"train mnist --max-steps 1, phase by phase ({found[0]['file']})",
    )
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(True, axis="x", alpha=0.3)
    return True


_TOTALS = ("to first step", "whole process")


def scaling(figure: Figure, docs: Sequence[Document]) -> bool:
    """Samples/s on 1 and 2 local ranks per model (median of the rounds), linear dotted."""
    found = newest_part(docs, "overhead")
    if found is None:
        return False
    doc, part = found
    axes = figure.add_subplot()
    drawn = False
    for index, (model, name) in enumerate(AB_MODELS.items()):
        rounds = part["record"].get(model, {}).get("weak_scaling")
        if not rounds:
            continue
        one = statistics.median(r["1 rank"] for r in rounds)
        two = statistics.median(r["2 ranks"] for r in rounds)
        # The efficiency as the part reports it: the median of the rounds' own.
        efficiency = statistics.median(r["2 ranks"] / (2 * r["1 rank"]) for r in rounds)
        color = f"C{index}"
        label = f"{name} ({efficiency:.0%})"
        axes.plot([1, 2], [one, two], marker="o", color=color, label=label)
        axes.plot([1, 2], [one, 2 * one], linestyle=":", color=color)
        drawn = True
    if not drawn:
        return False
    cpus = doc["machine"].get("cpus", "?")
    axes.set_xticks([1, 2])
    axes.set_ylim(bottom=0)
    axes.set(
        xlabel="local ranks (gloo), batch per rank fixed",
        ylabel="samples/s",
        title=f"Weak scaling on {cpus} cores (dotted: linear; legend: efficiency)",
    )
    axes.legend(fontsize="small")
    axes.grid(True, alpha=0.3)
    return True


FIGURES: dict[str, Callable[[Figure, Sequence[Document]], bool]] = {
    THROUGHPUT: throughput,
    STARTUP: startup,
    SCALING: scaling,
}


def draw_all(results: Path, images: Path) -> list[str]:
    """Draw every figure whose part has results; the names of those drawn."""
    from matplotlib.figure import Figure

    docs = documents(results)
    images.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, draw in FIGURES.items():
        figure = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
        if not draw(figure, docs):
            print(
                f"figures: {name}: no results of its part in {results}; left as it is",
                file=sys.stderr,
            )
            continue
        image = io.BytesIO()
        # No software version or date in the file: the same results draw the same bytes.
        figure.savefig(image, format="png", metadata={"Software": None})
        (images / name).write_bytes(image.getvalue())
        drawn.append(name)
    return drawn


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--images", type=Path, default=IMAGES)
    args = parser.parse_args(argv)
    for name in draw_all(args.results, args.images):
        print(f"wrote {args.images / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
