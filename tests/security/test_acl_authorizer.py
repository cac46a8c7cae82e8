"""kbroker's ACL authorizer (kbroker.security.acl.StandardAuthorizer) against the rules of Kafka's
StandardAuthorizerData: super users, literal / wildcard / prefixed patterns, principal and host matching, DENY
over ALLOW, implied operations, ``allow.everyone.if.no.acl.found``, the index under additions and removals, the
DescribeAcls / DeleteAcls filters and ``authorize_by_resource_type``."""

from __future__ import annotations

import itertools
import random

import pytest

from kbroker.security.acl import (
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as Pat,
    ResourceType as Res,
    StandardAcl,
    StandardAuthorizer,
    parse_super_users,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
_ids = itertools.count(1)


def acl(name: str = "t", op: Op = Op.READ, perm: Perm = Perm.ALLOW, principal: str = ALICE, host: str = "*",
        pattern: Pat = Pat.LITERAL, rtype: Res = Res.TOPIC) -> StandardAcl:
    return StandardAcl(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


def authorizer(*acls: StandardAcl, **props: str) -> StandardAuthorizer:
    auth = StandardAuthorizer({k.replace("_", "."): v for k, v in props.items()})
    auth.load({next(_ids).to_bytes(16, "big"): a for a in acls})
    return auth


def allowed(auth: StandardAuthorizer, op: Op = Op.READ, name: str = "t", principal: str = ALICE,
            host: str = HOST, rtype: Res = Res.TOPIC) -> bool:
    return auth.authorize(principal, op, rtype, name, host)


def test_no_acls_denies_by_default_and_super_users_pass():
    auth = authorizer()
    assert not allowed(auth)
    auth = authorizer(acl(perm=Perm.DENY, op=Op.ALL, principal="User:*"), super_users=" User:admin ; User:ops;")
    assert auth.super_users == {"User:admin", "User:ops"}
    assert allowed(auth, Op.ALTER, principal="User:admin")  # DENY ACLs do not apply to super users
    assert allowed(auth, Op.CLUSTER_ACTION, "kafka-cluster", principal="User:ops", rtype=Res.CLUSTER)
    assert not allowed(auth, principal="User:admins")  # compared as written
    assert not allowed(auth, principal="Group:admin")


def test_super_users_must_be_principals():
    with pytest.raises(ValueError, match="super.users"):
        StandardAuthorizer({"super.users": "User:a;admin"})
    with pytest.raises(ValueError, match="allow.everyone.if.no.acl.found"):
        StandardAuthorizer({"allow.everyone.if.no.acl.found": "yes"})
    assert parse_super_users(None) == frozenset()


def test_literal_acl_matches_only_its_name_type_principal_and_operation():
    auth = authorizer(acl("orders"))
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.READ, "orders2")
    assert not allowed(auth, Op.READ, "order")
    assert not allowed(auth, Op.WRITE, "orders")
    assert not allowed(auth, Op.READ, "orders", principal=BOB)
    assert not allowed(auth, Op.READ, "orders", rtype=Res.GROUP)


def test_wildcard_name_and_wildcard_principal():
    auth = authorizer(acl("*", Op.WRITE), acl("shared", Op.READ, principal="User:*"))
    assert allowed(auth, Op.WRITE, "anything")
    assert allowed(auth, Op.WRITE, "*")
    assert not allowed(auth, Op.WRITE, "anything", principal=BOB)
    assert allowed(auth, Op.READ, "shared", principal=BOB)
    assert allowed(auth, Op.READ, "shared", principal="User:ANONYMOUS")
    # only User:* is a wildcard principal
    auth = authorizer(acl("t", principal="Group:*"))
    assert not allowed(auth, principal="Group:eng")


def test_prefixed_acls_match_every_name_that_starts_with_them():
    auth = authorizer(acl("fin-", Op.READ, pattern=Pat.PREFIXED), acl("fin-secret-", Op.READ, Perm.DENY,
                                                                      pattern=Pat.PREFIXED))
    assert allowed(auth, Op.READ, "fin-")
    assert allowed(auth, Op.READ, "fin-ledger")
    assert not allowed(auth, Op.READ, "fin")
    assert not allowed(auth, Op.READ, "xfin-ledger")
    assert not allowed(auth, Op.READ, "fin-secret-payroll")
    # a literal name that is a prefix of the resource does not match it
    auth = authorizer(acl("fin", Op.READ))
    assert not allowed(auth, Op.READ, "fin-ledger")
    # "*" as a PREFIXED pattern is no wildcard
    auth = authorizer(acl("*", Op.READ, pattern=Pat.PREFIXED))
    assert not allowed(auth, Op.READ, "t")
    assert allowed(auth, Op.READ, "*t")


def test_host_matches_exactly_or_wildcard():
    auth = authorizer(acl(host=HOST))
    assert allowed(auth, host=HOST)
    assert not allowed(auth, host="10.0.0.2")
    auth = authorizer(acl(), acl(perm=Perm.DENY, host="10.0.0.2"))
    assert allowed(auth, host=HOST)
    assert not allowed(auth, host="10.0.0.2")


@pytest.mark.parametrize("deny", [
    acl("t", Op.READ, Perm.DENY),
    acl("*", Op.READ, Perm.DENY),
    acl("t", Op.READ, Perm.DENY, principal="User:*"),
    acl("t", Op.ALL, Perm.DENY, pattern=Pat.PREFIXED),
    acl("t", Op.ALL, Perm.DENY, host=HOST),
])
def test_deny_wins_over_allow_wherever_it_comes_from(deny: StandardAcl):
    auth = authorizer(acl("t", Op.READ), acl("*", Op.ALL), deny)
    assert not allowed(auth, Op.READ, "t")
    auth.remove_acl(next(i for i, a in auth._by_id.items() if a == deny))
    assert allowed(auth, Op.READ, "t")


def test_implied_operations_come_from_allow_acls_only():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert allowed(authorizer(acl(op=op)), Op.DESCRIBE), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert not allowed(authorizer(acl(op=op)), Op.DESCRIBE), op
    assert allowed(authorizer(acl(op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert not allowed(authorizer(acl(op=Op.ALTER)), Op.DESCRIBE_CONFIGS)
    assert not allowed(authorizer(acl(op=Op.READ)), Op.WRITE)  # nothing else is implied
    assert not allowed(authorizer(acl(op=Op.DESCRIBE)), Op.READ)
    # ALL matches every operation, allowed or denied
    auth = authorizer(acl(op=Op.ALL))
    assert all(allowed(auth, op) for op in Op if op not in (Op.UNKNOWN, Op.ANY))
    auth = authorizer(acl("*", op=Op.ALL), acl(op=Op.ALL, perm=Perm.DENY))
    assert not any(allowed(auth, op) for op in Op)
    # DENY READ does not deny DESCRIBE (a DENY covers its own operation only)
    auth = authorizer(acl(op=Op.ALL), acl(op=Op.READ, perm=Perm.DENY))
    assert not allowed(auth, Op.READ) and allowed(auth, Op.DESCRIBE) and allowed(auth, Op.WRITE)
    auth = authorizer(acl(op=Op.READ), acl(op=Op.DESCRIBE, perm=Perm.DENY))
    assert allowed(auth, Op.READ) and not allowed(auth, Op.DESCRIBE)


def test_allow_everyone_if_no_acl_found_only_when_the_resource_has_no_acl_at_all():
    auth = authorizer(acl("t", Op.READ, principal=BOB), acl("p-", Op.WRITE, principal=BOB, pattern=Pat.PREFIXED),
                      acl("x", Op.READ, principal=BOB, rtype=Res.GROUP), allow_everyone_if_no_acl_found="true")
    assert allowed(auth, Op.WRITE, "other")  # no ACL of that topic
    assert allowed(auth, Op.READ, "x")  # the GROUP x ACL is of another resource type
    assert not allowed(auth, Op.WRITE, "t")  # t has an ACL (for bob, READ): everyone else is denied
    assert not allowed(auth, Op.READ, "p-1")  # so does every p- topic
    assert not allowed(auth, Op.READ, "x", rtype=Res.GROUP)
    assert allowed(auth, Op.READ, "t", principal=BOB)
    # an ACL of another host still counts as an ACL of the resource
    auth = authorizer(acl("t", host="192.168.0.9"), allow_everyone_if_no_acl_found="true")
    assert not allowed(auth, Op.READ, "t")
    # a wildcard ACL is an ACL of every resource of its type
    auth = authorizer(acl("*", Op.READ, principal=BOB), allow_everyone_if_no_acl_found="true")
    assert not allowed(auth, Op.READ, "anything")
    assert not allowed(authorizer(acl("*", principal=BOB)), Op.READ, "anything")


def test_index_follows_additions_replacements_and_removals():
    auth = StandardAuthorizer()
    a, b = b"a" * 16, b"b" * 16
    auth.add_acl(a, acl("p-", pattern=Pat.PREFIXED))
    auth.add_acl(b, acl("p-x", pattern=Pat.PREFIXED, perm=Perm.DENY))
    assert allowed(auth, name="p-1") and not allowed(auth, name="p-x1")
    auth.add_acl(b, acl("q", perm=Perm.DENY))  # replaced under the same id
    assert allowed(auth, name="p-x1") and len(auth) == 2
    auth.update({a: acl("p-", pattern=Pat.PREFIXED)}, [b])  # b is gone from the image
    assert len(auth) == 1 and auth._lengths[Res.TOPIC] == (2,)
    auth.remove_acl(a)
    auth.remove_acl(a)  # twice: nothing happens
    assert len(auth) == 0 and not auth._prefixed and not auth._lengths.get(Res.TOPIC)
    assert not allowed(auth, name="p-1")


def _reference(acls: list[StandardAcl], principal: str, op: int, rtype: int, name: str, host: str,
               allow_everyone: bool) -> bool:
    """A direct transcription of the rules (no index), to check the indexed decision against."""
    def of_resource(a: StandardAcl) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == Pat.LITERAL:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    mine = [a for a in acls if of_resource(a)]
    applying = [a for a in mine if a.principal in (principal, "User:*") and a.host in (host, "*")]
    if any(a.permission_type == Perm.DENY and a.operation in (op, Op.ALL) for a in applying):
        return False
    implies = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
    if any(a.permission_type == Perm.ALLOW and (a.operation in (op, Op.ALL) or a.operation in implies.get(op, ()))
           for a in applying):
        return True
    return allow_everyone and not mine


@pytest.mark.parametrize("seed", range(5))
def test_random_acls_decide_as_the_rules_say(seed: int):
    rng = random.Random(seed)
    names = ["a", "ab", "abc", "b", "*", "abd"]
    ops = [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
    acls = [acl(rng.choice(names), rng.choice(ops), rng.choice([Perm.ALLOW, Perm.DENY]),
                rng.choice([ALICE, BOB, "User:*"]), rng.choice(["*", HOST, "10.9.9.9"]),
                rng.choice([Pat.LITERAL, Pat.PREFIXED]), rng.choice([Res.TOPIC, Res.GROUP]))
            for _ in range(rng.randint(1, 12))]
    for everyone in (False, True):
        auth = authorizer(*acls, allow_everyone_if_no_acl_found=str(everyone).lower())
        for name, op, principal, host, rtype in itertools.product(
                ["a", "ab", "abc", "abcd", "b", "z", "*"], ops[1:], [ALICE, BOB], [HOST, "10.9.9.9"],
                [Res.TOPIC, Res.GROUP]):
            assert auth.authorize(principal, op, rtype, name, host) == _reference(
                acls, principal, op, rtype, name, host, everyone), (name, op, principal, host, rtype, acls)


def test_filters_match_as_kafkas_acl_binding_filter():
    lit, pre, star = acl("foo"), acl("fo", pattern=Pat.PREFIXED), acl("*")
    group = acl("foo", rtype=Res.GROUP, op=Op.DESCRIBE, perm=Perm.DENY, principal=BOB, host=HOST)
    auth = authorizer(lit, pre, star, group)
    everything = AclBindingFilter()
    assert auth.acls(everything) == sorted([lit, pre, star, group], key=StandardAcl.sort_key)
    assert auth.acls(AclBindingFilter(resource_type=Res.TOPIC, resource_name="foo")) == [lit]
    assert auth.acls(AclBindingFilter(resource_type=Res.TOPIC, resource_name="foo",
                                      pattern_type=Pat.MATCH)) == sorted([lit, pre, star], key=StandardAcl.sort_key)
    assert auth.acls(AclBindingFilter(resource_name="fo", pattern_type=Pat.PREFIXED)) == [pre]
    assert auth.acls(AclBindingFilter(pattern_type=Pat.LITERAL, resource_type=Res.TOPIC)) == [star, lit]
    assert auth.acls(AclBindingFilter(principal=BOB)) == [group]
    assert auth.acls(AclBindingFilter(host=HOST)) == [group]
    assert auth.acls(AclBindingFilter(operation=Op.DESCRIBE)) == [group]
    assert auth.acls(AclBindingFilter(operation=Op.ALL)) == []  # ALL is matched as a value, not as "any"
    assert auth.acls(AclBindingFilter(permission_type=Perm.DENY)) == [group]
    assert AclBindingFilter().unknown_part() is None
    assert AclBindingFilter(resource_type=Res.UNKNOWN).unknown_part() == "Unknown patternFilter."
    assert AclBindingFilter(pattern_type=9).unknown_part() == "Unknown patternFilter."
    assert AclBindingFilter(operation=Op.UNKNOWN).unknown_part() == "Unknown entryFilter."
    assert AclBindingFilter(permission_type=7).unknown_part() == "Unknown entryFilter."


def test_authorize_by_resource_type():
    # KIP-679: may alice WRITE some topic?
    assert not authorizer().authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(super_users="User:alice").authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(acl("t", Op.WRITE)).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(acl("t", Op.ALL)).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert not authorizer(acl("t", Op.READ)).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert not authorizer(acl("t", Op.WRITE, host="1.1.1.1")).authorize_by_resource_type(ALICE, Op.WRITE,
                                                                                         Res.TOPIC, HOST)
    assert not authorizer(acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)).authorize_by_resource_type(
        ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert not authorizer(acl("p-t", Op.WRITE), acl("p-", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)
                          ).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(acl("p-t", Op.WRITE), acl("q", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)
                      ).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert not authorizer(acl("t", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)).authorize_by_resource_type(
        ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(acl("*", Op.WRITE), allow_everyone_if_no_acl_found="false").authorize_by_resource_type(
        ALICE, Op.WRITE, Res.TOPIC, HOST)
    assert authorizer(acl("g", Op.READ, rtype=Res.GROUP), allow_everyone_if_no_acl_found="true"
                      ).authorize_by_resource_type(ALICE, Op.WRITE, Res.TOPIC, HOST)
