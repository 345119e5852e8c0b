"""lab.data.text: The Devil's Dictionary from Debian's dict-devil, offline."""

from pathlib import Path

import numpy as np
import pytest

from lab.data import text
from lab.data.download import DataError

installed = pytest.mark.skipif(not Path("/usr/share/dictd/devil.dict.dz").exists(),
                               reason="Debian's dict-devil is not installed "
                                      "(scripts/system_deps.sh installs it)")


@installed
def test_devils_dictionary_loads_split_and_decodes():
    corpus = text.load_text("devils_dictionary")
    assert len(corpus.train) + len(corpus.test) == 383_107
    assert len(corpus.test) == round(0.1 * 383_107)
    assert len(corpus.vocabulary) == 84 and corpus.vocabulary == "".join(sorted(corpus.vocabulary))
    assert corpus.decode(corpus.train[:22]) == "THE DEVIL'S DICTIONARY"
    assert corpus.train.dtype == np.int32 and corpus.train.max() < 84


def test_windows_shift_targets_by_one():
    ids = np.arange(10, dtype=np.int32)
    x, y = text.windows(ids, 3, np.array([0, 6]))
    np.testing.assert_array_equal(x, [[0, 1, 2], [6, 7, 8]])
    np.testing.assert_array_equal(y, [[1, 2, 3], [7, 8, 9]])


def test_unknown_corpus_and_missing_package_are_one_line_errors(monkeypatch, data_dir):
    with pytest.raises(ValueError, match="^unknown text corpus 'shakespeare'; choose one of "
                                         "devils_dictionary$"):
        text.load_text("shakespeare")
    missing = ("devils_dictionary", (Path("/nonexistent/devil.dict.dz"), "dict-devil", "0" * 64,
                                     "THE"))
    monkeypatch.setitem(text._CORPORA, *missing)
    with pytest.raises(DataError, match=r"install Debian's package dict-devil \(apt-get install "
                                        r"dict-devil, or scripts/system_deps.sh\), or put a "
                                        r"copy in .*text \(python -m lab bundle does\)$"):
        text.load_text("devils_dictionary")
