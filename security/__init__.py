"""rafka security: TLS, SASL/SCRAM authentication (docs/security.md).

``security.scram`` (the SCRAM exchange, sans I/O), ``security.sasl`` (the broker's per-connection
gate, the client's login), ``security.tls`` (contexts, the server's TLS accept),
``security.certs`` (a throw-away CA for local clusters), ``security.listener`` (a node's
``[security]`` table) and ``security.client`` (kafka-python's client options).
"""
