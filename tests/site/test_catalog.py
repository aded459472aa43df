"""The pages' tables of shipped profiles are the profiles' own data (tests/site/catalog.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import check_or_update_region
from tests.site.catalog import (
    PROFILES_README,
    README,
    REGION,
    REPO,
    SITES_PAGE,
    SUMMARY_REGION,
    profiles,
    readme_table,
    summary_table,
)


@pytest.mark.parametrize("path", [SITES_PAGE, PROFILES_README], ids=lambda p: p.name)
def test_site_table_is_generated_from_the_profiles(path: Path) -> None:
    check_or_update_region(path, REGION, readme_table())


def test_readmes_line_per_site_is_generated_from_the_profiles() -> None:
    check_or_update_region(README, SUMMARY_REGION, summary_table())


def test_each_site_links_to_its_rendered_job() -> None:
    examples = (REPO / "docs" / "sbatch-examples.md").read_text(encoding="utf-8")
    rows = summary_table().splitlines()[2:]
    assert len(rows) == len(profiles())
    for profile, row in zip(profiles(), rows, strict=True):
        assert f"(docs/sbatch-examples.md#{profile.name}) | `{profile.name}` |" in row
        assert f"\n## {profile.name}\n" in examples, profile.name


def test_the_table_has_a_row_per_profile_with_its_runtime_and_status() -> None:
    rows = readme_table().splitlines()[2:]
    assert len(rows) == len(profiles())
    puhti = next(row for row in rows if "| `puhti` |" in row)
    assert "| apptainer | `ddp-cu128.sif` (cuda12) | 4 x V100 |" in puhti
    assert puhti.endswith("| **retired** |")
    perlmutter = next(row for row in rows if "| `perlmutter` |" in row)
    assert "| podman-hpc | `ddpimg:gpu-cu128` (cuda12) |" in perlmutter
