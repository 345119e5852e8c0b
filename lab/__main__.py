import sys

from lab.lazy import skip_iri_grammar

skip_iri_grammar()  # before lab.cli imports nbformat: 1.5 s of every `python -m lab`

from lab.cli import main  # noqa: E402

sys.exit(main())
