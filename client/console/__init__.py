"""The web console (``rafka console``): one page served by the Python package itself.

Theory of operation
-------------------
``server`` runs a tiny trio HTTP server (``rafka.wire.http_server``, the nodes' own) with JSON
endpoints built from the admin API and the nodes' Prometheus scrapes; ``snapshot`` shapes those
answers (pure functions, tested without a cluster); ``page`` is the single HTML document, inline
CSS and JavaScript, that polls the endpoints and draws the tables and SVG charts — no build step,
no network access beyond the console itself. The ``rafka console`` command that starts it is
``client/cli/console.py``.
"""

__all__: list[str] = []
