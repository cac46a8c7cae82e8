"""SparkSession for the clickstream jobs, with Spark's Kafka connector on the classpath.

The connector (``spark-sql-kafka-0-10``) is not part of the pyspark wheel. Two ways to provide it:

* the usual one: ``spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``, which
  Spark resolves from Maven Central at start-up (the default here, when no local jars are given);
* local jars: ``--jars a.jar,b.jar`` on the job's command line and/or the environment variable
  ``KBROKER_SPARK_JARS`` (comma-separated; a directory stands for every ``*.jar`` in it). They need the
  connector, ``spark-token-provider-kafka-0-10``, ``kafka-clients`` and ``commons-pool2``.

In local mode the driver binds to loopback (``SPARK_LOCAL_IP``, default 127.0.0.1) so nothing listens on
other interfaces; the session time zone is UTC so windows print the same everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

JARS_ENV = "KBROKER_SPARK_JARS"
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def kafka_package(version: str | None = None) -> str:
    return KAFKA_PACKAGE.format(version=version or spark_version())


def local_jars(cli_jars: str | Iterable[str] | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """The local jar list: ``--jars`` entries first, then ``KBROKER_SPARK_JARS``; directories expand to
    their ``*.jar`` files (sorted), duplicates are dropped. A listed path that does not exist raises
    FileNotFoundError, so a typo fails at start-up instead of as a missing data source later."""
    env = os.environ if env is None else env
    items: list[str] = []
    for source in (cli_jars, env.get(JARS_ENV)):
        if not source:
            continue
        parts = source.split(",") if isinstance(source, str) else list(source)
        items += [p.strip() for p in parts if p and p.strip()]
    out: list[str] = []
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            found = sorted(str(p.resolve()) for p in path.glob("*.jar"))
            if not found:
                raise FileNotFoundError(f"{item}: directory has no *.jar ({JARS_ENV} / --jars)")
        elif path.is_file():
            found = [str(path.resolve())]
        else:
            raise FileNotFoundError(f"{item}: no such jar ({JARS_ENV} / --jars)")
        out += [f for f in found if f not in out]
    return out


def session_conf(app_name: str, *, jars: list[str] | None = None, packages: str | None = None,
                 master: str | None = None, ui: bool = False, shuffle_partitions: int | None = None,
                 extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark configuration ``build_session`` uses (separate so it can be checked without a JVM).

    ``jars`` (local files) win over ``packages``; with neither, ``spark.jars.packages`` names the connector
    of the installed Spark version, the usual way."""
    master = master or os.environ.get("SPARK_MASTER") or "local[2]"
    conf = {
        "spark.app.name": app_name,
        "spark.master": master,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):
        host = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
        conf["spark.driver.host"] = host
        conf["spark.driver.bindAddress"] = host
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    elif packages is None:
        conf["spark.jars.packages"] = kafka_package()
    elif packages:
        conf["spark.jars.packages"] = packages
    conf.update(extra or {})
    return conf


def build_session(app_name: str, *, jars: list[str] | None = None, packages: str | None = None,
                  master: str | None = None, ui: bool = False, shuffle_partitions: int | None = None,
                  extra: Mapping[str, str] | None = None):  # noqa: ANN201 (pyspark imported lazily)
    """A SparkSession configured by ``session_conf``. If a session is already running in this process
    (e.g. under spark-submit, which set its own --jars/--packages), that one is returned."""
    conf = session_conf(app_name, jars=jars, packages=packages, master=master, ui=ui,
                        shuffle_partitions=shuffle_partitions, extra=extra)
    if conf.get("spark.master", "").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", conf["spark.driver.host"])
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
