"""The one TOML reader of site profiles and job files, and the shared value types."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from ddpimg.errors import ProfileError
from ddpimg.tomlfile import INTEGER, NUMBER, STRING_LIST, Kind, read_toml, toml_string


def read(path: Path) -> dict[str, object]:
    return read_toml(path, ProfileError, what="site profile", path_hint="check --site").document


def test_a_good_file_is_parsed_and_its_bytes_kept(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_bytes(b'name = "lumi"\n[network]\ninterfaces = ["hsn0"]\n')
    parsed = read_toml(path, ProfileError, what="site profile", path_hint="check --site")
    assert parsed.document == {"name": "lumi", "network": {"interfaces": ["hsn0"]}}
    assert parsed.data == path.read_bytes()


@pytest.mark.parametrize(
    ("content", "message", "hint"),
    [
        (None, r"cannot read site profile .*missing\.toml: No such file", "check --site"),
        (b"name = \xff\n", r"not UTF-8 text", "save it as UTF-8"),
        (b'name = "a"\nport = = 4\n', r"not valid TOML", "fix the TOML syntax at line 2, column 8"),
    ],
    ids=["missing", "not-utf8", "bad-syntax"],
)
def test_each_unreadable_file_names_itself_and_the_fix(
    tmp_path: Path, content: bytes | None, message: str, hint: str
) -> None:
    path = tmp_path / ("missing.toml" if content is None else "site.toml")
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ProfileError, match=message) as caught:
        read(path)
    assert caught.value.hint == hint
    assert str(path) in caught.value.message


@pytest.mark.parametrize(
    ("kind", "accepted", "refused"),
    [
        (INTEGER, [0, 4, -1], [True, False, 4.0, "4"]),
        (NUMBER, [1, 2.5], [True, "1"]),
        (STRING_LIST, [[], ["a", "b"]], [["a", 1], "a", ("a",)]),
    ],
)
def test_a_boolean_is_never_a_number_and_lists_hold_strings(
    kind: Kind, accepted: list[object], refused: list[object]
) -> None:
    assert all(kind.accepts(value) for value in accepted)
    assert not any(kind.accepts(value) for value in refused)


@pytest.mark.parametrize(
    "text",
    ["plain", 'a "quoted" word', "back\\slash", "new\nline\ttab\r", "\x00\x1f\x7f", "é ünï 😀",
     "${PWD}/$(id)", "'"],
)  # fmt: skip
def test_toml_string_reads_back_as_itself_on_one_line(text: str) -> None:
    written = toml_string(text)
    assert "\n" not in written
    assert tomllib.loads(f"x = {written}\n") == {"x": text}
