import sys

from lab.experiments.cli import main

sys.exit(main())
