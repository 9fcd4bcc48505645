"""``python -m rafka``: the ``rafka`` command (``rafka.cli``)."""

from rafka.cli import main

main()
