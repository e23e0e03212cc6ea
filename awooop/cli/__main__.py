"""``python -m awooop.cli``: the ``awooop`` command."""

import sys

from awooop.cli import main

if __name__ == "__main__":  # importing the module (as the wheel check does) runs nothing
    sys.exit(main())
