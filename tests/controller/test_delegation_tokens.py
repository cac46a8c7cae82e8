"""Delegation tokens in the metadata image (KIP-48): the plans of kbroker.controller.delegation_token_control, the
replay of DelegationTokenRecord / RemoveDelegationTokenRecord, the snapshot records, and the SCRAM credential a
token logs in with (the ``tokenauth`` extension of kbroker.security.sasl.ScramServer)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from kbroker.controller.delegation_token_control import (
    expired_token_records,
    plan_create_delegation_token,
    plan_expire_delegation_token,
    plan_renew_delegation_token,
    token_hmac,
    token_lookup,
)
from kbroker.controller.image import MetadataDelta, MetadataImage
from kbroker.controller.snapshot import image_records
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import FeatureLevelRecord, RemoveDelegationTokenRecord

SECRET = "s3cret"
DAY, WEEK = 86_400_000, 604_800_000


def _image(*records) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.empty("c"))
    delta.replay(FeatureLevelRecord(name="metadata.version", feature_level=27))
    for r in records:
        delta.replay(r)
    return delta.apply()


def _create(image, now=1_000, requester="User:alice", owner=None, renewers=(), max_life=-1, secret=SECRET):
    return plan_create_delegation_token(image, now, secret, WEEK, DAY, requester, owner, list(renewers), max_life)


def test_create_answers_id_hmac_and_timestamps_and_the_record_replays():
    records, (code, owner, requester, issue, expiry, max_ts, token_id, mac) = _create(
        _image(), renewers=[("User", "bob")], max_life=3_600_000)
    assert (code, owner, requester, issue, max_ts, expiry) == (0, "User:alice", "User:alice", 1_000, 3_601_000,
                                                               3_601_000)
    assert len(token_id) == 22 and mac == hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()
    image = _image(*records)
    token = image.delegation_tokens[token_id]
    assert (token.owner, token.renewers, token.expiry_timestamp) == ("User:alice", ("User:bob",), 3_601_000)
    # the default lifetimes: expiry after delegation.token.expiry.time.ms, max after max.lifetime.ms
    _, result = _create(image, now=0)
    assert (result[4], result[5]) == (DAY, WEEK)
    # the snapshot records rebuild the same tokens
    assert _image(*image_records(image)).delegation_tokens == image.delegation_tokens


def test_create_errors():
    assert _create(_image(), secret="")[1][0] == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert _create(_image(), renewers=[("Group", "x")])[1][0] == ErrorCode.INVALID_PRINCIPAL_TYPE
    old = MetadataDelta(MetadataImage.empty("c"))
    old.replay(FeatureLevelRecord(name="metadata.version", feature_level=13))
    assert _create(old.apply())[1][0] == ErrorCode.UNSUPPORTED_VERSION
    records, result = _create(_image(), owner="User:bob")
    assert records and result[1:3] == ("User:bob", "User:alice")


def test_renew_expire_owner_renewer_and_expiry_rules():
    records, result = _create(_image(), owner="User:bob", renewers=[("User", "carol")])
    image, mac = _image(*records), result[7]
    # the owner and the renewers may renew; the requester of a token for someone else may not
    assert plan_renew_delegation_token(image, 2_000, SECRET, DAY, "User:alice", mac, -1)[1] == \
        ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    recs, code, expiry = plan_renew_delegation_token(image, 2_000, SECRET, DAY, "User:carol", mac, 60_000)
    assert (code, expiry) == (0, 62_000) and recs[0].expiration_timestamp == 62_000
    assert plan_renew_delegation_token(image, 2_000, SECRET, DAY, "User:bob", b"x" * 64, -1)[1] == \
        ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert plan_renew_delegation_token(image, DAY + 2_000, SECRET, DAY, "User:bob", mac, -1)[1] == \
        ErrorCode.DELEGATION_TOKEN_EXPIRED
    # expire: a period keeps the token until the sweep; a negative one removes it
    recs, code, expiry = plan_expire_delegation_token(image, 2_000, SECRET, "User:bob", mac, 10)
    assert (code, expiry) == (0, 2_010)
    later = _image(*records, *recs)
    assert expired_token_records(later, 2_010) == [] and expired_token_records(later, 2_011) == [
        RemoveDelegationTokenRecord(token_id=result[6])]
    recs, code, expiry = plan_expire_delegation_token(image, 2_000, SECRET, "User:bob", mac, -1)
    assert (code, expiry) == (0, 2_000) and _image(*records, *recs).delegation_tokens == {}


def test_a_token_logs_in_over_scram_with_tokenauth_as_its_owner():
    """The client side done by hand (scramp's client sends no extensions): client-first with ``tokenauth=true``,
    user name the token id, password base64(hmac); the proofs cover the extensions."""
    import os

    from kbroker.security.sasl import AuthenticationFailed, ScramServer

    records, result = _create(_image(), owner="User:bob")
    image, token_id, mac = _image(*records), result[6], result[7]
    lookup = token_lookup(lambda: image, SECRET)

    def login(password: str, extensions: str = ",tokenauth=true") -> ScramServer:
        server = ScramServer("SCRAM-SHA-256", lambda u, m: None, lookup)
        nonce = base64.b64encode(os.urandom(18)).decode()
        bare = f"n={token_id},r={nonce}{extensions}"
        first = server.step(f"n,,{bare}".encode()).decode()
        attrs = dict(a.split("=", 1) for a in first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{bare},{first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server.step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        return server

    server = login(base64.b64encode(mac).decode())
    assert server.complete and server.username == "bob" and server.token_authenticated
    for bad in (lambda: login("wrong"), lambda: login(base64.b64encode(mac).decode(), ",other=1"),
                lambda: login(base64.b64encode(token_hmac("other", token_id)).decode())):
        try:
            bad()
        except AuthenticationFailed:
            continue
        raise AssertionError("accepted")
