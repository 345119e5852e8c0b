import os
import sys

from lab.lazy import skip_iri_grammar

skip_iri_grammar()  # before lab.cli imports nbformat: 1.5 s of every `python -m lab`

from lab.cli import main  # noqa: E402

try:
    sys.exit(main())
except BrokenPipeError:  # `python -m lab runs | head`: the reader left; no traceback
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
    sys.exit(141)  # 128 + SIGPIPE, as a shell reports it
