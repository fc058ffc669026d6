"""``python -m edgeq.cli``: the same as ``python -m edgeq`` and the ``edgeq`` script."""

from edgeq.cli import main

if __name__ == "__main__":
    main()
