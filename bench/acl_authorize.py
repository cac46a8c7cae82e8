#!/usr/bin/env python3
"""Cost of an ACL decision with 10,000 ACLs (issue 11's benchmark): ``StandardAuthorizer.authorize`` calls per
second, in-process, no broker.

The ACL set (``--acls``, default 10,000): 100 principals ``User:u0..u99``; per principal literal READ and WRITE
ACLs on its own topics ``t-<p>-<i>``, PREFIXED READ ACLs on ``p<p>-<i>-`` prefixes of three lengths, a GROUP ACL
and a DENY; plus a ``User:*`` DESCRIBE on the wildcard topic ``*``. Cases, each ``--calls`` decisions over a
rotating set of 1,000 requests:

* ``literal allow``: a principal READs one of its literal topics;
* ``prefixed allow``: a principal READs a topic under one of its prefixes (``p3-7-orders-eu``);
* ``denied``: a principal WRITEs a topic of another (the topic has ACLs, none applies);
* ``implied describe``: DESCRIBE of a literal topic (allowed by READ / the wildcard);
* ``no acl``: a topic nobody named (checks the literal, every prefix length and the wildcard);
* ``by resource type``: ``authorize_by_resource_type`` (may the principal WRITE some topic; KIP-679), which scans
  every ACL as Kafka's default implementation does.

Usage: ``python bench/acl_authorize.py [--acls 10000] [--calls 300000]``. Prints calls/s and µs per call per
case. Not a test: nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.security.acl import (  # noqa: E402
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as Pat,
    ResourceType as Res,
    StandardAcl,
    StandardAuthorizer,
)

PRINCIPALS = 100
HOST = "10.0.0.7"


def build(n_acls: int) -> StandardAuthorizer:
    acls: list[StandardAcl] = [StandardAcl(Res.TOPIC, "*", Pat.LITERAL, "User:*", "*", Op.DESCRIBE, Perm.ALLOW)]
    per = max(1, (n_acls - 1) // PRINCIPALS)
    for p in range(PRINCIPALS):
        who = f"User:u{p}"
        for i in range(per):
            kind = i % 10
            if kind < 6:
                acls.append(StandardAcl(Res.TOPIC, f"t-{p}-{i}", Pat.LITERAL, who, "*",
                                        Op.READ if kind % 2 else Op.WRITE, Perm.ALLOW))
            elif kind < 9:
                prefix = f"p{p}-{i}-" + "x" * (kind - 6)
                acls.append(StandardAcl(Res.TOPIC, prefix, Pat.PREFIXED, who, "*", Op.READ, Perm.ALLOW))
            else:
                acls.append(StandardAcl(Res.GROUP, f"g-{p}-{i}", Pat.LITERAL, who, "*", Op.READ, Perm.ALLOW))
        acls.append(StandardAcl(Res.TOPIC, f"t-{p}-1", Pat.LITERAL, who, "10.9.9.9", Op.ALL, Perm.DENY))
    acls = acls[:n_acls]
    auth = StandardAuthorizer({})
    auth.load({i.to_bytes(16, "big"): a for i, a in enumerate(acls)})
    return auth


def cases() -> dict[str, list[tuple[str, Op, Res, str]]]:
    def rot(f):  # noqa: ANN001, ANN202
        return [f(k % PRINCIPALS, k) for k in range(1000)]

    return {
        "literal allow": rot(lambda p, k: (f"User:u{p}", Op.READ, Res.TOPIC, f"t-{p}-{1 + 2 * (k % 3)}")),
        "prefixed allow": rot(lambda p, k: (f"User:u{p}", Op.READ, Res.TOPIC, f"p{p}-{6 + 10 * (k % 3)}-orders-eu")),
        "denied": rot(lambda p, k: (f"User:u{p}", Op.WRITE, Res.TOPIC, f"t-{(p + 1) % PRINCIPALS}-0")),
        "implied describe": rot(lambda p, k: (f"User:u{p}", Op.DESCRIBE, Res.TOPIC, f"t-{p}-1")),
        "no acl": rot(lambda p, k: (f"User:u{p}", Op.READ, Res.TOPIC, f"unrelated-topic-{k}")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=300_000)
    args = parser.parse_args()
    auth = build(args.acls)
    print(f"{len(auth)} ACLs; Python {sys.version.split()[0]}")
    for name, requests in cases().items():
        allowed = sum(auth.authorize(*r, HOST) for r in requests)
        n = len(requests)
        authorize = auth.authorize
        start = time.perf_counter()
        for i in range(args.calls):
            principal, op, rtype, resource = requests[i % n]
            authorize(principal, op, rtype, resource, HOST)
        elapsed = time.perf_counter() - start
        print(f"{name:17s} {args.calls / elapsed:>12,.0f} calls/s  {elapsed / args.calls * 1e6:6.2f} µs/call  "
              f"({allowed}/{n} allowed)")
    # KIP-679 (InitProducerId of an idempotent producer without IdempotentWrite): a scan of every ACL
    calls = 200
    start = time.perf_counter()
    allowed = sum(auth.authorize_by_resource_type(f"User:u{k % PRINCIPALS}", Op.WRITE, Res.TOPIC, HOST)
                  for k in range(calls))
    elapsed = time.perf_counter() - start
    print(f"{'by resource type':17s} {calls / elapsed:>12,.0f} calls/s  {elapsed / calls * 1e6:6.0f} µs/call  "
          f"({allowed}/{calls} allowed)")


if __name__ == "__main__":
    main()
