"""``python -m trainscope``."""

import sys

from trainscope.cli import main

sys.exit(main())
