"""The wire vocabulary every rafka package speaks: the leaf of the import graph.

``wire`` holds what a byte on a rafka socket means, and nothing that decides what to do about it:

* ``apis`` — the API keys and request schemas; ``responses`` — the response bodies as
  ``TypedDict`` types; ``api_table`` — the one API table (``ApiKey`` → request, response, route,
  ACL, origin) every part that routes or authorizes reads; ``protocol`` — request/response
  framing and the msgpack codec (sans I/O); ``errors`` — every wire error code and its
  exception class;
* ``frame_reader`` — cutting frames off a byte stream (the codec's framing, with fewer
  copies); ``connection`` — the trio client
  connection and pool (security plugs in through the structural ``ConnectionSecurity``);
* ``dispatch`` — the server-side reply types (``Reply``, ``FileSlice``, ``Dispatch``) that
  listeners and authorizers share; ``settings`` — ``ConfigError`` and ``parse_hostport``;
  ``ports`` — a local cluster's port layout; ``http_server`` — the tiny HTTP/1.1 server of
  ``/metrics`` and the console; ``gc_freeze`` — the start-up heap freeze every process uses.

It imports no other rafka package (``tests/test_layering.py`` fails if it does), so ``log``,
``broker``, ``client``, ``security``, ``kraft`` and ``spark_source`` can all import it without
importing each other.
"""
