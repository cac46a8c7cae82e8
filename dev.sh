#!/usr/bin/env bash
# Set-up and entry points for a fresh clone. Everything it needs is installed on first use:
#   ./dev.sh broker   start kbroker on the embedded default (localhost:9092, data in ./kbroker-data)
#   ./dev.sh test     run every test (unit, property, and the real-client compat suite on kbroker, then the
#                     reference slice on Apache Kafka 4.3.1); with arguments: pytest with those arguments only
#   ./dev.sh kafka    start the reference Apache Kafka 4.3.1 (one KRaft node on a free port, printed)
#   ./dev.sh bench    run the benchmarks in bench/ (--against kafka [--against tansu]: side by side, bench/versus.py)
#   ./dev.sh profile  profile the broker under one of bench/request_cost.py's cases (py-spy, flame graph)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
VENV=$ROOT/.venv
PY=$VENV/bin/python

need_apt() {  # install Debian packages that are missing (kcat for the compat suite)
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

setup_python() {  # venv with kbroker (editable) and, for tests, the client libraries
  local extras=$1
  local stamp=$VENV/.installed-$extras
  if [ ! -x "$PY" ]; then python3 -m venv "$VENV"; fi
  # setup.py and the C source too: a changed record check must be rebuilt into the editable install
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
     || [ kbroker/protocol/_recordcheck.c -nt "$stamp" ]; then
    "$PY" -m pip install -q --upgrade pip >/dev/null
    "$PY" -m pip install -q -e ".[$extras]"
    touch "$stamp"
  fi
}

cmd=${1:-help}
shift || true
case "$cmd" in
  broker)
    setup_python test
    # the README's quickstart calls kcat; install Debian's when it is missing (the broker runs without it)
    command -v kcat >/dev/null || need_apt kcat || echo "dev.sh: could not install kcat; the broker starts anyway" >&2
    exec "$VENV/bin/kbroker" "$@"
    ;;
  test)
    setup_python test,spark
    # the Spark tests need exactly the pinned pyspark (its connector is resolved for the pin): a venv that has
    # another one (an older clone's, where pyproject.toml was not newer than the stamp) gets the pin now
    spark_pin=$(grep -oE '"pyspark==[^"]+"' pyproject.toml | head -1 | tr -d '"')
    [ "$("$PY" -c 'from importlib.metadata import version; print(version("pyspark"))' 2>/dev/null)" = "${spark_pin#pyspark==}" ] \
      || "$PY" -m pip install -q "$spark_pin"
    command -v kcat >/dev/null || need_apt kcat
    command -v iptables >/dev/null || need_apt iptables  # the cluster tests' partitions (kbroker/testing/firewall.py)
    command -v javac >/dev/null || need_apt openjdk-17-jdk-headless
    command -v mvn >/dev/null || need_apt maven
    bash scripts/fetch_jars.sh  # Java clients, Kafka Streams, reference Kafka 4.3.1, Spark connector: by coordinates (java/pom.xml)
    if [ $# -gt 0 ]; then exec "$PY" -m pytest "$@"; fi
    # Everything: the whole suite against kbroker (two workers, a file per worker at a time: the tests of one
    # file share their brokers), then the tests marked kafka_reference against Apache Kafka 4.3.1 itself, so
    # their expectations are Kafka's. The 30 slowest tests are printed: the run must stay under 45 minutes.
    rc=0
    "$PY" -m pytest -n 2 --dist loadfile -q -ra --durations=30 || rc=$?
    "$PY" -m pytest compat_tests --kbroker-target=kafka -m kafka_reference -n 2 --dist loadfile -q -ra \
      --durations=10 || rc=$?
    exit $rc
    ;;
  kafka)
    setup_python test
    command -v javac >/dev/null || need_apt openjdk-17-jdk-headless
    command -v mvn >/dev/null || need_apt maven
    bash scripts/fetch_jars.sh kafka
    exec "$PY" -m kbroker.testing.kafka "$@"
    ;;
  bench)
    setup_python test,bench
    # --against kafka / tansu: one node of each side by side (bench/versus.py; the load from Kafka's own perf
    # tools and from confluent-kafka, each in processes of its own); otherwise kbroker alone (bench/run.py)
    if [[ " $* " == *" --against "* ]]; then
      command -v javac >/dev/null || need_apt openjdk-17-jdk-headless
      command -v mvn >/dev/null || need_apt maven
      bash scripts/fetch_jars.sh kafka
      exec "$PY" bench/versus.py "$@"
    fi
    exec "$PY" bench/run.py "$@"
    ;;
  profile)
    setup_python test,bench
    exec "$PY" bench/profile.py "$@"
    ;;
  *)
    sed -n '2,8p' "$0"
    exit 2
    ;;
esac
