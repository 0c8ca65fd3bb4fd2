"""``python -m ipympi.notebook.engine``: the supervisor that forks a session's engines."""

import sys

from .supervisor import main

if __name__ == "__main__":
    sys.exit(main())
