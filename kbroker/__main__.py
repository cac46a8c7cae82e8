"""``python -m kbroker``: the same as the ``kbroker`` command (the embedded default, or ``server-start FILE``)."""

import sys

from kbroker.cli.main import main

sys.exit(main())
