"""Helpers for the Spark tests: the SparkCallsDriver (kafka-clients 3.9.2, the connector's client calls) and
local SparkSessions with Spark's Kafka connector (cached by scripts/fetch_jars.sh spark, or ``KBROKER_SPARK_JARS``)."""
