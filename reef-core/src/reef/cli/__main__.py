"""``python -m reef.cli``: the ``reef`` command, for an environment without its script."""

import sys

from reef.cli import main

if __name__ == "__main__":
    sys.exit(main())
