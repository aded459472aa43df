"""The tokenizers of ``ddpimg data tokenize``: GPT-2's BPE through tiktoken, read from local
files, or the byte-level one built in.

tiktoken downloads GPT-2's encoding files on first use and keeps them in its cache, which
fails on compute nodes without internet. ddpimg never lets it try:

* ``--encoding-dir DIR`` names a directory holding the files: GPT-2's release pair
  ``vocab.bpe`` + ``encoder.json``, the same pair as a Hugging Face ``gpt2`` directory has
  them (``merges.txt`` + ``vocab.json``), or tiktoken's own ``gpt2.tiktoken`` /
  ``r50k_base.tiktoken`` (the mergeable ranks, as some packages ship them);
* or tiktoken's cache (``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else
  ``$TMPDIR/data-gym-cache``) already holds both files, filled on a machine with internet by
  ``TIKTOKEN_CACHE_DIR=DIR python -c "import tiktoken; tiktoken.get_encoding('gpt2')"``;
* otherwise the command stops and says so, before reading any text.

Every document is encoded with ``encode_ordinary`` (special-token text in a document is
plain text, never a special token) and preceded by the end-of-text token, as llm.c's
``dev/data`` scripts do, so the token delimits every document.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ddpimg.errors import DataError

GPT2 = "gpt2"
BYTES = "bytes"
TOKENIZERS = (GPT2, BYTES)
ENDOFTEXT = "<|endoftext|>"
# GPT-2's pre-tokenisation pattern as tiktoken writes it (tiktoken_ext.openai_public).
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)
# The files tiktoken's gpt2 encoding downloads (their cache names are the SHA-1 of these).
GPT2_URLS = (
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
)
DATA_GYM_PAIRS = (("vocab.bpe", "encoder.json"), ("merges.txt", "vocab.json"))
TIKTOKEN_FILES = ("gpt2.tiktoken", "r50k_base.tiktoken")
OFFLINE_HINT = (
    "give --encoding-dir DIR with GPT-2's vocab.bpe and encoder.json (or a Hugging Face gpt2 "
    "directory's merges.txt and vocab.json, or gpt2.tiktoken), or fill tiktoken's cache on a "
    'machine with internet: TIKTOKEN_CACHE_DIR=DIR python -c "import tiktoken; '
    "tiktoken.get_encoding('gpt2')\", then copy DIR here and export TIKTOKEN_CACHE_DIR=DIR; "
    "or use --tokenizer bytes"
)


class Tokenizer(Protocol):
    name: str
    #: Token ids are 0 .. vocabulary - 1; ``eot`` is the end-of-text token.
    vocabulary: int
    eot: int

    def encode(self, text: str) -> list[int]:
        """The tokens of one document's text, without the end-of-text token."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255; the end-of-text token is 256."""

    name = BYTES
    vocabulary = 257
    eot = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class TiktokenTokenizer:
    """A tiktoken encoding; ``encode_ordinary`` per document."""

    def __init__(self, name: str, encoding: Any) -> None:
        self.name = name
        self.encoding = encoding
        self.vocabulary = int(encoding.n_vocab)
        self.eot = int(encoding.eot_token)

    def encode(self, text: str) -> list[int]:
        tokens: list[int] = self.encoding.encode_ordinary(text)
        return tokens


def encode_documents(tokenizer: Tokenizer, texts: list[str], dtype: np.dtype[Any]) -> np.ndarray:
    """The documents' tokens, each preceded by the end-of-text token, as one array."""
    parts = []
    for text in texts:
        parts.append(tokenizer.eot)
        parts.extend(tokenizer.encode(text))
    return np.array(parts, dtype=dtype)


def tiktoken_cache_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Where tiktoken keeps downloaded encoding files (its ``load.read_file_cached`` rule)."""
    if "TIKTOKEN_CACHE_DIR" in env:
        return Path(env["TIKTOKEN_CACHE_DIR"])
    if "DATA_GYM_CACHE_DIR" in env:
        return Path(env["DATA_GYM_CACHE_DIR"])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def cached_gpt2_files(cache: Path) -> list[Path]:
    """The cache files tiktoken's gpt2 encoding reads instead of downloading."""
    return [cache / hashlib.sha1(url.encode()).hexdigest() for url in GPT2_URLS]


def _gpt2_from(directory: Path) -> Any:
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks, load_tiktoken_bpe

    ranks = None
    for merges, vocabulary in DATA_GYM_PAIRS:
        if (directory / merges).is_file() and (directory / vocabulary).is_file():
            try:
                ranks = data_gym_to_mergeable_bpe_ranks(
                    str(directory / merges), str(directory / vocabulary)
                )
            except (AssertionError, KeyError, ValueError) as err:
                raise DataError(
                    f"--encoding-dir {directory}: {merges} and {vocabulary} do not fit together "
                    f"({type(err).__name__})",
                    hint="copy both files of one release, unchanged",
                ) from err
            break
    else:
        for name in TIKTOKEN_FILES:
            if (directory / name).is_file():
                ranks = load_tiktoken_bpe(str(directory / name))
                break
    if ranks is None:
        expected = ", ".join(
            [f"{a} + {b}" for a, b in DATA_GYM_PAIRS] + [name for name in TIKTOKEN_FILES]
        )
        raise DataError(
            f"--encoding-dir {directory}: none of the encoding files is there ({expected})",
            hint=OFFLINE_HINT,
        )
    return tiktoken.Encoding(
        name=GPT2,
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={ENDOFTEXT: len(ranks)},
    )


def load_tokenizer(name: str, encoding_dir: Path | None) -> Tokenizer:
    """The tokenizer ``--tokenizer`` names, from ``--encoding-dir`` or tiktoken's cache;
    DataError saying where the files are looked for when they are not there."""
    if name == BYTES:
        return ByteTokenizer()
    if name != GPT2:
        raise DataError(
            f"--tokenizer must be one of {', '.join(TOKENIZERS)}, got {name!r}",
            hint="gpt2: GPT-2's BPE (tiktoken); bytes: UTF-8 bytes",
        )
    if encoding_dir is not None:
        if not encoding_dir.is_dir():
            raise DataError(f"--encoding-dir {encoding_dir} is not a directory", hint=OFFLINE_HINT)
        return TiktokenTokenizer(GPT2, _gpt2_from(encoding_dir))
    cache = tiktoken_cache_dir()
    missing = [path for path in cached_gpt2_files(cache) if not path.is_file()]
    if missing:
        raise DataError(
            f"tiktoken's GPT-2 encoding files are not in its cache {cache} (missing "
            f"{', '.join(path.name for path in missing)}), and this machine may have no "
            "internet to download them",
            hint=OFFLINE_HINT,
        )
    import tiktoken

    return TiktokenTokenizer(GPT2, tiktoken.get_encoding(GPT2))
