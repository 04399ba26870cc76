"""``python -m bpsa.cli``: the same as the ``bpsa`` console script."""

import sys

from bpsa.cli import main

sys.exit(main())
