"""Download files into the local cache, verified by sha256.

The cache is ``$LAB_DATA_DIR`` (default ``~/.cache/lab``). A file is written to a
temporary name next to its destination and renamed only after its checksum matches,
so an interrupted or corrupted download never stays behind looking valid.
"""

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple


class DataError(RuntimeError):
    """A dataset could not be made available; the message says how to fix it."""


class Remote(NamedTuple):
    """One file of a dataset: where to get it and what it must hash to."""

    filename: str
    urls: tuple[str, ...]  # mirrors, tried in order
    sha256: str


def data_dir() -> Path:
    """The cache directory: ``$LAB_DATA_DIR`` or ``~/.cache/lab``."""
    return Path(os.environ.get("LAB_DATA_DIR") or Path.home() / ".cache" / "lab")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(remote: Remote, folder: Path, *, timeout: float = 30.0) -> Path:
    """Return ``folder/remote.filename``, downloading and verifying it if needed.

    A cached file whose checksum does not match is an error (it is not silently
    replaced: the user may have put it there). A failed download leaves nothing.
    """
    target = folder / remote.filename
    if target.exists():
        if sha256(target) != remote.sha256:
            raise DataError(
                f"{target} has the wrong sha256 (expected {remote.sha256[:12]}...); "
                "delete it and load again to re-download"
            )
        return target
    folder.mkdir(parents=True, exist_ok=True)
    failures = []
    for url in remote.urls:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{remote.filename}.", suffix=".part", dir=folder)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            got = sha256(tmp)
            if got != remote.sha256:
                failures.append(f"{url}: sha256 mismatch (got {got[:12]}..., "
                                f"expected {remote.sha256[:12]}...)")
                continue
            tmp.replace(target)
            return target
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            failures.append(f"{url}: {getattr(err, 'reason', err)}")
        finally:
            tmp.unlink(missing_ok=True)
    raise DataError(
        f"could not download {remote.filename} ({'; '.join(failures)}); "
        f"connect to the internet or copy the file into {folder}"
    )
