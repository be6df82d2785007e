"""``python -m probsched.cli``: the ``probsched`` console script without the installed script."""

import sys

from . import main

sys.exit(main())
