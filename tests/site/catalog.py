"""The tables of shipped profiles, generated from the profiles themselves: the full one in
docs/sites.md and site-profiles/README.md, a line per site in README.md (test_catalog.py fails
when a page drifts from them; regenerate with ``DDPIMG_UPDATE_GOLDEN=1 python -m pytest
tests/site``)."""

from __future__ import annotations

from pathlib import Path

from ddpimg.jobs.flavour import default_image, unbuildable
from ddpimg.site.container import RUNTIMES
from ddpimg.site.load import load_profile
from ddpimg.site.model import SiteProfile

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "site-profiles"
README = REPO / "README.md"
SITES_PAGE = REPO / "docs" / "sites.md"
PROFILES_README = PROFILES / "README.md"
REGION = "site-table"
SUMMARY_REGION = "site-summary"
# Where README's site column links: the site's rendered job (docs/sbatch-examples.md has a
# section per profile, tests/jobs/examples.py).
EXAMPLES_LINK = "docs/sbatch-examples.md#{name}"
# Real sites first, in the order people look for them; the fallbacks last.
FALLBACKS = ("generic", "local")


def profiles() -> list[SiteProfile]:
    loaded = [load_profile(path) for path in sorted(PROFILES.glob("*.toml"))]
    return sorted(loaded, key=lambda p: (p.name in FALLBACKS, p.name))


def _site(profile: SiteProfile) -> str:
    return profile.description.split(":", 1)[0].removesuffix(" (retired)")


def _gpus(profile: SiteProfile) -> str:
    job, hardware = profile.job, profile.hardware
    if not job.gpus_per_node:
        return "-"
    gpus = f"{job.gpus_per_node} x {hardware.gpus}" if hardware.gpus else str(job.gpus_per_node)
    if job.max_gpus_per_node > job.gpus_per_node:
        gpus += f" (or {job.max_gpus_per_node}: `--constraint {job.max_gpus_constraint}`)"
    return gpus


def _image(profile: SiteProfile) -> str:
    runtime = profile.container.runtime
    if not runtime or not RUNTIMES[runtime].image_form:
        return "-"
    # A site without a GPU count still runs GPU jobs (--gpus-per-node); only Gloo's is CPU.
    gpus = profile.backend != "gloo"
    if profile.container.image_from == "site":
        name = profile.container.image.rpartition("/")[2]
        return f"the site's own: `{name}`, with `--ddpimg-from`"
    image = profile.container.image or default_image(runtime, profile.hardware, gpus)
    flavour = f" ({profile.hardware.build})" if profile.hardware.build else ""
    missing = ", not buildable yet" if unbuildable(profile.hardware) else ""
    return f"`{image}`{flavour}{missing}"


def _network(profile: SiteProfile) -> str:
    interfaces = ", ".join(profile.interfaces) or "NCCL/Gloo choose"
    return f"`{profile.master_addr}`; {interfaces}"


def _status(profile: SiteProfile) -> str:
    return "**retired**" if profile.status == "retired" else profile.status


def readme_table() -> str:
    """The full table (docs/sites.md, site-profiles/README.md): how each site runs the image."""
    rows = [
        "| site | profile | runtime | image (flavour) | GPUs per node | master; interfaces "
        "| fabric | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for profile in profiles():
        rows.append(
            f"| {_site(profile)} | `{profile.name}` | {profile.container.runtime or '-'} "
            f"| {_image(profile)} | {_gpus(profile)} | {_network(profile)} "
            f"| {profile.fabric.transport or '-'} | {_status(profile)} |"
        )
    return "\n".join(rows) + "\n"


def summary_table() -> str:
    """README.md's table: a line per site, its name linking to the site's rendered job."""
    rows = [
        "| site | profile | runtime | image (flavour) | GPUs per node | status |",
        "|---|---|---|---|---|---|",
    ]
    for profile in profiles():
        link = EXAMPLES_LINK.format(name=profile.name)
        rows.append(
            f"| [{_site(profile)}]({link}) | `{profile.name}` "
            f"| {profile.container.runtime or '-'} | {_image(profile)} | {_gpus(profile)} "
            f"| {_status(profile)} |"
        )
    return "\n".join(rows) + "\n"
