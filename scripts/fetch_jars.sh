#!/usr/bin/env bash
# Resolve the Java jars the tests, the tools and the reference broker use, by Maven coordinates, from
# java/pom.xml (one profile per destination) into .cache/:
#
#   clients    .cache/jars/          kafka-clients 4.3.1 + runtime jars (compat_tests/java/*Driver.java)
#   clients39  .cache/jars-3.9/      kafka-clients 3.9.2, the client Spark 4.2's Kafka connector is built with
#   clients44  .cache/jars-4.4/      kafka-clients 4.4.0 + runtime jars (the Java drivers with KBROKER_JAVA_CLIENT=4.4.0;
#                                    not in the default set: compat_tests/conftest.py resolves it when asked)
#   kafka      .cache/kafka-4.3.1/   Apache Kafka 4.3.1: broker, StorageTool and tools (kbroker.testing.kafka)
#   streams    .cache/streams-4.3.1/ Kafka Streams 4.3.1 + runtime jars (compat_tests/java/StreamsDriver.java)
#   spark      .cache/spark-<v>/     Spark's Kafka connector for PySpark <v> (compat_tests/test_spark_connector.py)
#
# <v> is the one place the Spark version is set: the pyspark pin (pyspark==<v>) of pyproject.toml's spark
# extra, passed to Maven as -Dspark.version; the connector's POM brings the kafka-clients and commons-pool2
# versions of that Spark release. KBROKER_SPARK_VERSION=<v> resolves another release's connector instead
# (bench/spark_versions.sh runs the Spark tests on PySpark 4.0.x that way); Maven Central must serve it.
#
# Maven's local repository is .cache/m2, so once a profile has been resolved it is reused offline. A
# destination is complete when its stamp (.cache/<dir>/.resolved) holds the hash of java/pom.xml; a changed
# pom.xml resolves it again. Installs Maven (Debian's package) when mvn is missing.
#
# Usage: scripts/fetch_jars.sh [PROFILE ...]     (default: clients clients39 kafka streams spark)
# Env:   KBROKER_M2_REPO        Maven local repository (default <repo>/.cache/m2)
#        KBROKER_SPARK_VERSION  the Spark release of profile spark (default: the pyspark pin)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$REPO_ROOT/java/pom.xml"
M2="${KBROKER_M2_REPO:-$REPO_ROOT/.cache/m2}"
profiles=("$@")
[[ ${#profiles[@]} -gt 0 ]] || profiles=(clients clients39 kafka streams spark)

spark_version="${KBROKER_SPARK_VERSION:-$(grep -oE '"pyspark==[0-9][0-9A-Za-z.+-]*"' "$REPO_ROOT/pyproject.toml" | head -1 | cut -d= -f3 | tr -d '"')}"
if [[ -z "$spark_version" ]]; then
  echo "fetch_jars: no pyspark==<version> pin in $REPO_ROOT/pyproject.toml" >&2
  exit 2
fi

dest_of() {
  case "$1" in
    clients) echo "$REPO_ROOT/.cache/jars" ;;
    clients39) echo "$REPO_ROOT/.cache/jars-3.9" ;;
    clients44) echo "$REPO_ROOT/.cache/jars-4.4" ;;
    kafka) echo "$REPO_ROOT/.cache/kafka-4.3.1" ;;
    streams) echo "$REPO_ROOT/.cache/streams-4.3.1" ;;
    spark) echo "$REPO_ROOT/.cache/spark-$spark_version" ;;
    *) echo "fetch_jars: unknown profile $1 (clients, clients39, clients44, kafka, streams, spark)" >&2; return 2 ;;
  esac
}

pom_hash="$(sha256sum "$POM" | cut -c1-16)"
# one resolution at a time (parallel test workers may call this at once): the others wait, then find it done
mkdir -p "$REPO_ROOT/.cache"
exec 9>"$REPO_ROOT/.cache/.fetch_jars.lock"
flock 9
for profile in "${profiles[@]}"; do
  dest="$(dest_of "$profile")"
  if [[ -f "$dest/.resolved" && "$(cat "$dest/.resolved")" == "$pom_hash" ]]; then
    echo "fetch_jars: $profile present in $dest"
    continue
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    sudo=""; [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq maven >/dev/null
  fi
  # into a fresh directory, then swapped in, so an interrupted run never leaves a half-filled destination
  tmp="$dest.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$dest")"
  if ! mvn -q -B -f "$POM" -Dmaven.repo.local="$M2" -Dspark.version="$spark_version" -P "$profile" \
        dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    echo "fetch_jars: mvn could not resolve profile $profile" >&2
    exit 1
  fi
  rm -f "$tmp.log"
  echo "$pom_hash" >"$tmp/.resolved"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "fetch_jars: $profile resolved into $dest ($(ls "$dest" | wc -l) jars)"
done
