"""Security below the server: TLS contexts from Kafka's ``ssl.*`` keys (:mod:`kbroker.security.tls`) and the
principal a client certificate maps to (:mod:`kbroker.security.principal`). Used by the listeners, by this
node's own connections to other nodes and by the tools; nothing here imports the server."""
