"""`python -m benchmarks <name> [options]`: the system benchmarks, from the repository root."""

import sys

from benchmarks.harness.command import main

if __name__ == "__main__":
    sys.exit(main())
