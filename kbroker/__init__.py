"""kbroker: a Kafka wire-protocol-compatible broker."""
