"""``python -m jaxcal`` = the ``jaxcal`` command."""

import sys

from jaxcal._src.cli import main

sys.exit(main())
