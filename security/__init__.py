"""rafka security: TLS, SASL/SCRAM authentication, ACLs (docs/security.md).

``rafka.security.scram`` (the SCRAM exchange, sans I/O), ``rafka.security.sasl`` (the broker's per-connection
gate, the client's login), ``rafka.security.tls`` (contexts, the server's TLS accept),
``rafka.security.certs`` (a throw-away CA for local clusters), ``rafka.security.listener`` (a node's
``[security]`` table), ``rafka.security.client`` (kafka-python's client options), ``rafka.security.acl``
(the ACL evaluator, pure) and ``rafka.security.authz`` (which ACL each API needs, checked before
dispatch).
"""
