"""docs/usage.md's tables of train's options are the parser's own (ddpimg.cli.options_table)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ddpimg.cli import options_table

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def test_the_documented_options_are_the_parsers() -> None:
    documented = options_table.region_of(USAGE.read_text(encoding="utf-8"))
    generated = options_table.render()
    assert documented == generated, (
        f"{USAGE} lists other options than train's parser has; regenerate the table with "
        f"`{options_table.UPDATE_COMMAND}` and review the diff"
    )


def test_every_option_of_train_has_a_row() -> None:
    table = options_table.render()
    parser = options_table.train_parser()
    options = [
        name
        for action in parser._actions
        for name in action.option_strings
        if name not in ("-h", "--help")
    ]
    assert len(options) > 40
    for name in options:
        assert f"`{name}`" in table, name


def test_a_row_shows_the_metavar_the_choices_and_the_expanded_default() -> None:
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("things")
    group.add_argument("--mode", choices=["a", "b"], default="a", help="how (default: %(default)s)")
    group.add_argument("--where", metavar="X|Y", help="a|b")
    group.add_argument("--flag", action="store_true", help="on")
    table = options_table.render(parser)
    assert "**things**" in table
    assert "| `--mode` {a,b} | how (default: a) |" in table
    assert "| `--where` X\\|Y | a\\|b |" in table
    assert "| `--flag` | on |" in table


def test_update_rewrites_only_the_region(tmp_path: Path) -> None:
    page = tmp_path / "usage.md"
    page.write_text(
        f"# head\n<!-- {options_table.REGION} -->\nold\n<!-- /{options_table.REGION} -->\ntail\n"
    )
    assert options_table.update(page) is True
    text = page.read_text()
    assert text.startswith("# head\n")
    assert text.endswith(f"<!-- /{options_table.REGION} -->\ntail\n")
    assert options_table.region_of(text) == options_table.render()
    assert options_table.update(page) is False


def test_a_page_without_one_pair_of_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="no single"):
        options_table.region_of("no markers here")
