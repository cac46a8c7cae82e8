#!/usr/bin/env bash
# The Spark tests on a PySpark release other than the pinned one (pyproject.toml's spark extra, which CI runs).
# Kept out of CI for time; run by hand, e.g. before moving the pin or for a user on an older Spark:
#
#   bench/spark_versions.sh                     # PySpark 4.0.0: test_spark_connector.py + test_spark_pipeline.py
#   bench/spark_versions.sh 4.0.0 -k offsets    # a release; the arguments after it go to pytest
#   bench/spark_versions.sh 4.0.0 compat_tests/test_spark_cluster.py --kbroker-target=kafka
#
# The default, 4.0.0, is the only 4.0.x whose connector resolves from Maven Central as this machine reaches it
# (2026-11-28): PyPI has pyspark up to 4.0.5, Maven Central spark-sql-kafka-0-10_2.13 up to 4.0.4, but its
# dependency spark-token-provider-kafka-0-10_2.13 only at 4.0.0 (and 4.1.1, 4.2.0) of the 4.0/4.1 releases,
# so 4.0.1-4.0.4 fail to resolve. For release <v>:
#   * a venv of its own, .cache/venv-pyspark-<v>/, with kbroker (editable), the test extra and pyspark==<v>
#     (created on first use; .venv is not touched);
#   * the connector of <v> by Maven coordinates into .cache/spark-<v>/ (KBROKER_SPARK_VERSION=<v>
#     scripts/fetch_jars.sh spark, profile spark of java/pom.xml; offline once resolved);
#   * pytest with KBROKER_SPARK_VERSION=<v>, so compat_tests/spark/support.py takes those jars and checks that
#     the installed pyspark is <v>. SparkCallsDriver (the producer some tests use) stays on the pin's client.
# Needs a JDK 17+ and Maven (./dev.sh test installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

version=4.0.0
if [[ $# -gt 0 && $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then version=$1; shift; fi
venv=$ROOT/.cache/venv-pyspark-$version
py=$venv/bin/python

installed() { "$py" -c 'from importlib.metadata import version; print(version("pyspark"))' 2>/dev/null || true; }
if [[ ! -x $py ]]; then python3 -m venv "$venv"; fi
stamp=$venv/.installed
if [[ "$(installed)" != "$version" || ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  "$py" -m pip install -q --upgrade pip >/dev/null
  "$py" -m pip install -q -e ".[test]" "pyspark==$version"
  touch "$stamp"
fi

KBROKER_SPARK_VERSION=$version bash scripts/fetch_jars.sh spark clients39

tests=()
if [[ $# -eq 0 || $1 == -* ]]; then tests=(compat_tests/test_spark_connector.py compat_tests/test_spark_pipeline.py); fi
echo "spark_versions: pyspark $(installed), connector jars .cache/spark-$version/"
export KBROKER_SPARK_VERSION=$version
exec "$py" -m pytest "${tests[@]}" -p no:randomly -q -ra --durations=15 "$@"
