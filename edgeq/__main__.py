"""``python -m edgeq``: the ``edgeq`` command line."""

from edgeq.cli import main

if __name__ == "__main__":
    main()
