"""``python -m dprag``: the ``dprag`` command line."""

from dprag.audit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
