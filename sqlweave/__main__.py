"""``python -m sqlweave``: the command line, for environments where the ``sqlweave`` script is not
on ``PATH`` (a ``pip --target`` install, a frozen checkout run with ``PYTHONPATH``)."""

from sqlweave.cli import main

if __name__ == "__main__":
    main()
