"""``python -m nimbus.cli``: the ``nimbus`` command without its console script."""

import sys

from nimbus.cli import main

sys.exit(main())
