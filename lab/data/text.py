"""Text corpora installed from the package registries, for character-level language models.

``load_text(name)`` returns ``Corpus(train, test, vocabulary)``: the text as ``int32``
character ids, split into a contiguous first 90% (train) and last 10% (test), and the
sorted characters the ids index.

- ``devils_dictionary``: Ambrose Bierce, *The Devil's Dictionary* (1911; public domain),
  the Internet Wiretap edition of 1993, as Debian's package ``dict-devil`` installs it for
  the dictd server (``/usr/share/dictd/devil.dict.dz``: dictzip, which gzip reads). The
  text starts at its title (the dictd header lines before it are dropped): 383,107
  characters, 84 distinct. The sha256 of the decompressed file is checked. Without the
  package, a copy under ``data_dir() / "text"`` (an offline bundle's) is read instead.

``windows(ids, length, starts)`` cuts ``(inputs, targets)`` pairs of ``length`` characters,
the targets shifted by one: a next-character prediction task.
"""

import gzip
import hashlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lab.data.download import DataError, data_dir

_TEST_FRACTION = 0.1
_CORPORA = {
    "devils_dictionary": (
        Path("/usr/share/dictd/devil.dict.dz"), "dict-devil",
        "703d1225d2fb927653bfd8b00e4e96938e0b630c6023edd26702ac6ed50383f8",
        "THE DEVIL'S DICTIONARY"),
}
CORPORA = tuple(_CORPORA)


class Corpus(NamedTuple):
    train: np.ndarray  # (n_train,) int32 character ids
    test: np.ndarray  # (n_test,) int32
    vocabulary: str  # the characters, sorted: id i is vocabulary[i]

    def decode(self, ids) -> str:
        return "".join(self.vocabulary[int(i)] for i in ids)


def corpus_file(name: str = "devils_dictionary") -> Path:
    """The corpus's file: the system package's, else a copy of it under ``data_dir() /
    "text"`` (an offline bundle's, ``python -m lab bundle``), checked alike on load."""
    path = _CORPORA[name][0]
    copy = data_dir() / "text" / path.name
    return copy if not path.exists() and copy.exists() else path


def load_text(name: str = "devils_dictionary") -> Corpus:
    """The corpus ``name`` (see the module docstring), or a one-line error naming what to
    install."""
    if name not in _CORPORA:
        raise ValueError(f"unknown text corpus {name!r}; choose one of {', '.join(CORPORA)}")
    _, package, digest, start = _CORPORA[name]
    path = corpus_file(name)
    if not path.exists():
        raise DataError(f"{path} is missing: install Debian's package {package} "
                        f"(apt-get install {package}, or scripts/system_deps.sh), or put a "
                        f"copy in {data_dir() / 'text'} (python -m lab bundle does)")
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if hashlib.sha256(raw).hexdigest() != digest:
        raise DataError(f"{path} is not the expected text (sha256 differs); reinstall "
                        f"Debian's package {package}")
    text = raw.decode("utf-8")
    text = text[text.index(start):]
    vocabulary = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(vocabulary)}
    ids = np.fromiter((lookup[c] for c in text), np.int32, len(text))
    cut = round(len(ids) * (1 - _TEST_FRACTION))
    return Corpus(ids[:cut], ids[cut:], vocabulary)


def windows(ids, length: int, starts) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)`` of shape ``(len(starts), length)``: ``ids[s : s + length]``
    and ``ids[s + 1 : s + length + 1]`` for each start ``s``. Works on numpy and jax arrays
    (``starts`` may be traced)."""
    offsets = np.arange(length)
    index = starts[:, None] + offsets[None, :]
    return ids[index], ids[index + 1]


def provenance(name: str = "devils_dictionary") -> dict:
    """Where the corpus came from: its file, Debian package and installed version."""
    import subprocess

    _, package, digest, _ = _CORPORA[name]
    path = corpus_file(name)
    try:
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                                 capture_output=True, text=True, timeout=10).stdout or None
    except OSError:
        version = None
    return {"corpus": name, "file": str(path), "package": package, "version": version,
            "sha256": digest}
