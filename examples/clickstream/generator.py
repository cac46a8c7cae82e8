"""Publish page-view events to Kafka (or kbroker): JSON values keyed by user, with confluent-kafka.

    python examples/clickstream/generator.py --bootstrap localhost:9092 --count 10000 --rate 200

Events are a pure function of (seed, index, start time), so a test can recompute what was sent:
event i has ``ts = start_ms + i * step_ms - jitter`` with a jitter of at most ``jitter_ms`` (0 by
default), i.e. event time moves forward and is out of order by at most ``jitter_ms``. With ``--rate``
and no ``--start-ms`` the events are stamped with the wall clock as they are sent (a live stream).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from typing import Any, Iterable

PAGES = ("/", "/pricing", "/docs", "/docs/quickstart", "/blog", "/signup", "/login", "/cart")
TOPIC = "page-views"
WINDOW_MS = 60_000


def make_event(i: int, *, seed: int = 7, start_ms: int = 1_700_000_000_000, step_ms: int = 250,
               users: int = 50, jitter_ms: int = 0, ts: int | None = None) -> dict[str, Any]:
    """Page-view number ``i`` (deterministic for a given seed)."""
    rnd = random.Random(seed * 1_000_003 + i)
    user = f"u{rnd.randrange(users):03d}"
    page = PAGES[min(int(rnd.paretovariate(1.2)) - 1, len(PAGES) - 1)]  # a few pages get most views
    referrer = rnd.choice(PAGES)
    if ts is None:
        ts = start_ms + i * step_ms - (rnd.randrange(jitter_ms + 1) if jitter_ms else 0)
    return {"event_id": f"e-{seed}-{i:08d}", "user": user, "page": page, "ts": ts, "referrer": referrer}


def make_events(count: int, *, start_index: int = 0, **kw: Any) -> list[dict[str, Any]]:
    return [make_event(i, **kw) for i in range(start_index, start_index + count)]


def encode(event: dict[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) of the Kafka record for an event: key = user, value = compact JSON."""
    return event["user"].encode(), json.dumps(event, separators=(",", ":")).encode()


def window_start(ts_ms: int, window_ms: int = WINDOW_MS) -> int:
    return ts_ms - ts_ms % window_ms


def expected_counts(events: Iterable[dict[str, Any]], window_ms: int = WINDOW_MS) -> Counter:
    """{(window_start_ms, page): views} as the pipeline should compute them."""
    return Counter((window_start(e["ts"], window_ms), e["page"]) for e in events)


def closing_event(last_ts: int, *, watermark_delay_ms: int = 30_000, window_ms: int = WINDOW_MS,
                  seed: int = 7) -> dict[str, Any]:
    """One page view far enough after ``last_ts`` that the streaming job's watermark (largest event time
    minus ``watermark_delay_ms``) passes the end of the window holding ``last_ts``: once the stream has read
    it, every window up to ``last_ts`` is emitted. Its own window stays open. ``event_id`` ``e-<seed>-close``."""
    ts = window_start(last_ts, window_ms) + 2 * window_ms + watermark_delay_ms
    return {"event_id": f"e-{seed}-close", "user": "u000", "page": "/", "ts": ts, "referrer": "/"}


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0, *,
                 replication_factor: int = 1, config: dict[str, str] | None = None,
                 replica_assignment: list[list[int]] | None = None) -> None:
    """Create ``topic`` with ``partitions`` partitions, ``replication_factor`` replicas and topic ``config``
    (e.g. ``{"min.insync.replicas": "2"}``) unless it exists. ``replica_assignment`` (the broker ids of
    each partition's replicas, the preferred leader first) replaces partitions and replication factor."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    if replica_assignment:
        new = NewTopic(topic, num_partitions=len(replica_assignment), replica_assignment=replica_assignment,
                       config=dict(config or {}))
    else:
        new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    fut = admin.create_topics([new], request_timeout=timeout)[topic]
    try:
        fut.result(timeout)
    except Exception as exc:  # noqa: BLE001 - created meanwhile is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def publish(bootstrap: str, events: Iterable[dict[str, Any]], *, topic: str = TOPIC, rate: float = 0.0,
            compression: str = "lz4", linger_ms: int = 20, live: bool = False,
            extra_config: dict[str, Any] | None = None) -> list[tuple[int, int]]:
    """Produce the events (idempotent, acks=all) and return each one's (partition, offset) in order.
    ``rate`` > 0 paces sending (events per second); ``live`` re-stamps ``ts`` with the send time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": compression, "linger.ms": linger_ms, **(extra_config or {})})
    acks: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(i: int, err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"event {i}: {err}")
        else:
            acks[i] = (msg.partition(), msg.offset())

    t0 = time.monotonic()
    n = 0
    for n, event in enumerate(events, 1):
        if live:
            event = {**event, "ts": int(time.time() * 1000)}
        key, value = encode(event)
        while True:
            try:
                producer.produce(topic, value=value, key=key, timestamp=event["ts"],
                                 on_delivery=lambda err, msg, i=n - 1: on_delivery(i, err, msg))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if rate > 0:
            ahead = n / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"{left} events undelivered, errors: {errors[:5]}")
    return [acks[i] for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created (default 3)")
    ap.add_argument("--replication-factor", type=int, default=1, help="replicas if the topic is created (default 1)")
    ap.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                    help="config of the topic if created, e.g. min.insync.replicas=2")
    ap.add_argument("--close-windows", action="store_true",
                    help="end with closing_event(): the streaming job then emits every window of these events")
    ap.add_argument("--watermark-delay-ms", type=int, default=30_000,
                    help="the streaming job's --watermark, for --close-windows (default 30000, its default)")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--start-index", type=int, default=0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--start-ms", type=int, default=None,
                    help="event time of event 0 (default: now, or the send time with --rate)")
    ap.add_argument("--step-ms", type=int, default=250, help="event-time step between events (default 250)")
    ap.add_argument("--jitter-ms", type=int, default=0, help="max out-of-order delay of an event's time")
    ap.add_argument("--rate", type=float, default=0.0, help="events per second (default: as fast as possible)")
    ap.add_argument("--compression", default="lz4")
    args = ap.parse_args(argv)

    ensure_topic(args.bootstrap, args.topic, args.partitions, replication_factor=args.replication_factor,
                 config=dict(kv.split("=", 1) for kv in args.topic_config))
    live = args.rate > 0 and args.start_ms is None
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    events = make_events(args.count, start_index=args.start_index, seed=args.seed, start_ms=start_ms,
                         step_ms=args.step_ms, users=args.users, jitter_ms=args.jitter_ms)
    acks = publish(args.bootstrap, events, topic=args.topic, rate=args.rate, compression=args.compression,
                   live=live)
    if args.close_windows:
        last = int(time.time() * 1000) if live else max(e["ts"] for e in events)
        acks += publish(args.bootstrap, [closing_event(last, watermark_delay_ms=args.watermark_delay_ms,
                                                       seed=args.seed)],
                        topic=args.topic, compression=args.compression)
    ends: dict[int, int] = {}
    for p, o in acks:
        ends[p] = max(ends.get(p, -1), o + 1)
    print(json.dumps({"published": len(acks), "topic": args.topic,
                      "end_offsets": {str(p): o for p, o in sorted(ends.items())}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
