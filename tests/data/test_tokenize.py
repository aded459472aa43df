"""``ddpimg data tokenize``, offline, with a small GPT-2-style encoding the tests write
themselves (tests.datagen.write_small_encoding): nothing is downloaded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import tiktoken

from ddpimg.cli import main
from ddpimg.data import tokenindex
from ddpimg.data.tokenize import TokenizeOptions, tokenize
from ddpimg.data.tokenizers import GPT2_PATTERN, cached_gpt2_files, load_tokenizer
from ddpimg.data.tokenshards import HEADER_BYTES, LLMC_V1, inspect_shard, open_splits
from ddpimg.errors import DataError
from tests.datagen import write_small_encoding

WORDS = ("the", "and", "then", "hand", "than", "a", "at", "tan", "ant", "that")


def documents(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=int(rng.integers(5, 60))))
        + ("\n" if index % 3 else " é…\n")
        for index in range(count)
    ]


@pytest.fixture(scope="module")
def encoding(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tiktoken.Encoding]:
    directory = tmp_path_factory.mktemp("encoding")
    ranks = write_small_encoding(directory)
    reference = tiktoken.Encoding(
        name="small", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )  # fmt: skip
    return directory, reference


def write_sources(root: Path, docs: list[str]) -> list[Path]:
    """The first 5 documents as .txt files, the rest as two .jsonl files."""
    root.mkdir(parents=True)
    for index, text in enumerate(docs[:5]):
        (root / f"a{index}.txt").write_text(text, encoding="utf-8")
    rest = docs[5:]
    half = len(rest) // 2
    for name, part in (("b.jsonl", rest[:half]), ("c.jsonl", rest[half:])):
        lines = [json.dumps({"id": i, "text": text}) for i, text in enumerate(part)]
        (root / name).write_text("\n".join([*lines[:3], "", *lines[3:]]) + "\n", encoding="utf-8")
    return [root]


def read_split(target: Path, split: str) -> list[int]:
    tokens: list[int] = []
    for path in sorted(target.glob(f"corpus_{split}_*.bin")):
        assert inspect_shard(path).format == LLMC_V1
        tokens += np.fromfile(path, dtype="<u2", offset=HEADER_BYTES).tolist()
    return tokens


def test_documents_become_llm_c_shards_with_the_end_of_text_first(
    tmp_path: Path, encoding: tuple[Path, tiktoken.Encoding]
) -> None:
    directory, reference = encoding
    docs = documents(60)
    sources = write_sources(tmp_path / "src", docs)
    options = TokenizeOptions(encoding_dir=directory, val_every=10, shard_tokens=500, workers=2)
    result = tokenize(sources, tmp_path / "out", options, io.StringIO())
    eot = reference.eot_token
    expected = {"train": [], "val": []}  # type: dict[str, list[int]]
    for index, text in enumerate(docs):  # a*.txt sort before b.jsonl and c.jsonl
        split = "val" if index % 10 == 0 else "train"
        expected[split] += [eot, *reference.encode_ordinary(text)]
    assert read_split(tmp_path / "out", "train") == expected["train"]
    assert read_split(tmp_path / "out", "val") == expected["val"]
    assert result.documents == 60
    assert len(result.train.written) == -(-len(expected["train"]) // 500) > 1
    record = json.loads((tmp_path / "out" / "tokenizer.json").read_text())
    assert (record["tokenizer"], record["vocabulary"], record["eot_token"]) == ("gpt2", 263, 262)
    # Training reads the vocabulary from there and finds every shard's largest token known.
    splits = open_splits(str(tmp_path / "out"))
    maxima = tokenindex.max_tokens(splits, tmp_path / "run")
    assert maxima is not None
    assert max(maxima.values()) == max(expected["train"] + expected["val"])


def test_the_shards_do_not_depend_on_the_number_of_workers(
    tmp_path: Path, encoding: tuple[Path, tiktoken.Encoding]
) -> None:
    sources = write_sources(tmp_path / "src", documents(40, seed=3))
    outputs = []
    for workers in (1, 2):
        target = tmp_path / f"out{workers}"
        options = TokenizeOptions(encoding_dir=encoding[0], val_every=7, workers=workers)
        tokenize(sources, target, options, io.StringIO())
        outputs.append({p.name: p.read_bytes() for p in target.glob("*.bin")})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 2


def test_the_byte_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for index in range(3):
        (tmp_path / "src" / f"{index}.txt").write_text(f"dé{index}", encoding="utf-8")
    options = TokenizeOptions(tokenizer="bytes", val_every=2)
    tokenize([tmp_path / "src"], tmp_path / "out", options, io.StringIO())
    assert read_split(tmp_path / "out", "train") == [256, *"dé1".encode()]
    assert read_split(tmp_path / "out", "val") == [256, *"dé0".encode(), 256, *"dé2".encode()]


def test_missing_encoding_files_say_how_to_work_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"tiktoken's GPT-2 encoding files are not in its cache"):
        load_tokenizer("gpt2", None)
    names = [path.name for path in cached_gpt2_files(tmp_path / "cache")]
    # tiktoken's own cache names: the SHA-1 of the file's address.
    assert names == [
        "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
        "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    ]
    with pytest.raises(DataError, match=r"--encoding-dir .*: none of the encoding files"):
        load_tokenizer("gpt2", tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["data", "tokenize", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "hint: give --encoding-dir DIR with GPT-2's vocab.bpe and encoder.json" in err.getvalue()
    assert "TIKTOKEN_CACHE_DIR=DIR" in err.getvalue()


def test_a_hugging_face_pair_is_read_too(
    tmp_path: Path, encoding: tuple[Path, tiktoken.Encoding]
) -> None:
    directory, reference = encoding
    (tmp_path / "merges.txt").write_bytes((directory / "vocab.bpe").read_bytes())
    (tmp_path / "vocab.json").write_bytes((directory / "encoder.json").read_bytes())
    tokenizer = load_tokenizer("gpt2", tmp_path)
    assert tokenizer.encode("than the hand") == reference.encode_ordinary("than the hand")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"b.jsonl:2: not JSON"),
        ('{"body": "x"}', r"b.jsonl:2: no string field 'text'\n  hint: name the documents' field"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "b.jsonl").write_text('{"text": "ok"}\n' + line + "\n")
    with pytest.raises(DataError, match=message):
        tokenize(
            [tmp_path / "src"], tmp_path / "out", TokenizeOptions(tokenizer="bytes"), io.StringIO()
        )
    assert not list((tmp_path / "out").glob("*.bin"))


def test_the_command_line(
    tmp_path: Path, encoding: tuple[Path, tiktoken.Encoding], capsys: pytest.CaptureFixture[str]
) -> None:
    sources = write_sources(tmp_path / "src", documents(30))
    code = main(["data", "tokenize", str(sources[0]), str(tmp_path / "out"), "--encoding-dir",
                 str(encoding[0]), "--val-every", "5", "--workers", "1"])  # fmt: skip
    assert code == 0
    out, err = capsys.readouterr()
    assert "30 documents" in out
    assert f"train gpt --data {tmp_path / 'out'}" in out
    assert "tokenizing: " in err
    assert main(["data", "tokenize", str(sources[0]), str(tmp_path / "out"), "--encoding-dir",
                 str(encoding[0])]) == 2  # fmt: skip
    assert "holds corpus_*.bin shards already" in capsys.readouterr().err
