"""rafka security: TLS, SASL/SCRAM authentication, ACLs (docs/security.md).

``security.scram`` (the SCRAM exchange, sans I/O), ``security.sasl`` (the broker's per-connection
gate, the client's login), ``security.tls`` (contexts, the server's TLS accept),
``security.certs`` (a throw-away CA for local clusters), ``security.listener`` (a node's
``[security]`` table), ``security.client`` (kafka-python's client options), ``security.acl``
(the ACL evaluator, pure) and ``security.authz`` (which ACL each API needs, checked before
dispatch).
"""
