"""``python -m rafka``: the ``rafka`` command (``rafka.entry``: ``server`` directly, the rest
through ``rafka.cli``)."""

from rafka.entry import main

main()
