"""Helpers for the Spark tests: the SparkCallsDriver (kafka-clients 3.9.0, the connector's client calls) and
local SparkSessions, with or without the user-provided Kafka connector jars (``KBROKER_SPARK_JARS``)."""
