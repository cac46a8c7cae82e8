"""``kbroker-delegation-tokens``: create, renew, expire and describe delegation tokens (KIP-48), with the flags and
output of Kafka's ``kafka-delegation-tokens.sh``.

    kbroker-delegation-tokens --bootstrap-server localhost:9093 --command-config client.properties --create \\
        --max-life-time-period -1 --renewer-principal User:bob
    kbroker-delegation-tokens ... --renew --hmac <base64> --renew-time-period -1
    kbroker-delegation-tokens ... --expire --hmac <base64> --expiry-time-period -1
    kbroker-delegation-tokens ... --describe [--owner-principal User:alice ...]

``--command-config`` holds the Java client's security keys: the tokens are only handed out over SASL or TLS with a
client certificate. Create prints the token (id, HMAC, owner, requester, renewers, issue / expiry / max dates as
``yyyy-MM-ddTHH:mm`` in local time); renew and expire print the new expiry date (a negative
``--expiry-time-period`` expires the token at once); describe prints every token the caller may see (or those of
the owners named). A refused request prints ``Error while executing delegation token command : <exception>:
<message>`` and exits 1. Through kbroker's protocol codec (CreateDelegationToken v3, RenewDelegationToken v2,
ExpireDelegationToken v2, DescribeDelegationToken v3).
"""

from __future__ import annotations

import base64
import binascii
import sys
import time
from typing import Any

from kbroker.cli._common import CliError, ToolParser, add_command_config, add_version, load_properties, \
    run_tool, wire_ssl_context
from kbroker.protocol.errors import ErrorCode

PROG = "kbroker-delegation-tokens"

#: the exception Kafka's AdminClient raises for each error code and its default message (``Errors.java``)
_EXCEPTIONS: dict[int, tuple[str, str]] = {
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: ("DelegationTokenDisabledException",
                                               "Delegation Token feature is not enabled."),
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: ("DelegationTokenNotFoundException",
                                           "Delegation Token is not found on server."),
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: ("DelegationTokenOwnerMismatchException",
                                                "Specified Principal is not valid Owner/Renewer."),
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        "UnsupportedByAuthenticationException", "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL "
                                                "channels and on delegation token authenticated channels."),
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: ("DelegationTokenAuthorizationException",
                                                      "Delegation Token authorization failed."),
    ErrorCode.DELEGATION_TOKEN_EXPIRED: ("DelegationTokenExpiredException", "Delegation Token is expired."),
    ErrorCode.INVALID_PRINCIPAL_TYPE: ("InvalidPrincipalTypeException", "Supplied principalType is not supported."),
}


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="This tool helps to create, renew, expire, or describe delegation "
                                          "tokens.")
    add_version(p)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="REQUIRED: server(s) to use for bootstrapping.")
    add_command_config(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--create", action="store_true", help="Create a new delegation token.")
    action.add_argument("--renew", action="store_true", help="Renew delegation token.")
    action.add_argument("--expire", action="store_true", help="Expire delegation token.")
    action.add_argument("--describe", action="store_true", help="Describe delegation tokens for the given principals.")
    p.add_argument("--max-life-time-period", type=int, default=-1, metavar="MS",
                   help="Max life period for the token in milliseconds (-1: the broker's "
                        "delegation.token.max.lifetime.ms).")
    p.add_argument("--renewer-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="principalType:name of a principal that may renew the token (repeatable).")
    p.add_argument("--owner-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="principalType:name: the token's owner (--create) or owners to describe (--describe).")
    p.add_argument("--hmac", metavar="HMAC", help="HMAC of the delegation token (base64).")
    p.add_argument("--renew-time-period", type=int, default=-1, metavar="MS",
                   help="Renew time period in milliseconds (-1: the broker's delegation.token.expiry.time.ms).")
    p.add_argument("--expiry-time-period", type=int, default=-1, metavar="MS",
                   help="Expiry time period in milliseconds (negative: expire now).")
    return p


def _principal(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise CliError(f"expected a string in format principalType:principalName but got {text}")
    return kind, name


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.localtime(ms / 1000))


def _java_list(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _check(code: int) -> None:
    if code != ErrorCode.NONE:
        name, message = _EXCEPTIONS.get(code, (ErrorCode(code).name, ErrorCode(code).name))
        raise CliError(f"org.apache.kafka.common.errors.{name}: {message}")


def _print_tokens(tokens: list[tuple[str, bytes, str, str, list[str], int, int, int]]) -> None:
    row = "\n{:<15} {:<30} {:<15} {:<15} {:<25} {:<15} {:<15} {:<15}"
    print(row.format("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE", "MAXDATE"))
    for token_id, hmac, owner, requester, renewers, issue, expiry, max_ts in tokens:
        print(row.format(token_id, base64.b64encode(hmac).decode(), owner, requester, _java_list(renewers),
                         _date(issue), _date(expiry), _date(max_ts)))


def _hmac(args: Any) -> tuple[str, bytes]:
    if not args.hmac:
        raise CliError("Missing required argument \"[hmac]\"")
    try:
        return args.hmac, base64.b64decode(args.hmac, validate=True)
    except (binascii.Error, ValueError):
        raise CliError(f"--hmac {args.hmac!r} is not base64") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.create or args.renew or args.expire or args.describe):
        parser.error("Command must include exactly one action: --create, --renew, --expire or --describe")
    if not args.command_config:
        parser.error("Missing required argument \"[command-config]\"")
    renewers = [_principal(r) for r in args.renewer_principal]
    owners = [_principal(o) for o in args.owner_principal]

    def body() -> int:
        from kbroker.cli._wire import WireClient
        from kbroker.protocol.messages import (
            CreateDelegationTokenRequest,
            DescribeDelegationTokenRequest,
            ExpireDelegationTokenRequest,
            RenewDelegationTokenRequest,
        )

        security = wire_ssl_context(load_properties(args.command_config), PROG)
        with WireClient(args.bootstrap_server, ssl_context=security) as wire:
            try:
                if args.create:
                    names = [f"{k}:{n}" for k, n in renewers]
                    print(f"Calling create token operation with renewers :{_java_list(names)} , max-life-time-period "
                          f":{args.max_life_time_period}")
                    req = CreateDelegationTokenRequest(
                        renewers=[CreateDelegationTokenRequest.CreatableRenewers(principal_type=k, principal_name=n)
                                  for k, n in renewers],
                        max_lifetime_ms=args.max_life_time_period)
                    if owners:
                        req.owner_principal_type, req.owner_principal_name = owners[0]
                    else:
                        req.owner_principal_type = req.owner_principal_name = None  # type: ignore[assignment]
                    resp = wire.send(req)
                    _check(resp.error_code)
                    print(f"Created delegation token with tokenId : {resp.token_id}")
                    _print_tokens([(resp.token_id, bytes(resp.hmac), f"{resp.principal_type}:{resp.principal_name}",
                                    f"{resp.token_requester_principal_type}:{resp.token_requester_principal_name}"
                                    if resp.token_requester_principal_type else
                                    f"{resp.principal_type}:{resp.principal_name}", names,
                                    resp.issue_timestamp_ms, resp.expiry_timestamp_ms, resp.max_timestamp_ms)])
                elif args.renew or args.expire:
                    text, hmac = _hmac(args)
                    if args.renew:
                        print(f"Calling renew token operation with hmac :{text} , renew-time-period "
                              f":{args.renew_time_period}")
                        resp = wire.send(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=args.renew_time_period))
                    else:
                        print(f"Calling expire token operation with hmac :{text} , expire-time-period "
                              f":{args.expiry_time_period}")
                        resp = wire.send(ExpireDelegationTokenRequest(hmac=hmac,
                                                                      expiry_time_period_ms=args.expiry_time_period))
                    _check(resp.error_code)
                    what = "renew" if args.renew else "expire"
                    sys.stdout.write(f"Completed {what} operation. New expiry date : {_date(resp.expiry_timestamp_ms)}")
                    sys.stdout.flush()
                else:
                    if owners:
                        print(f"Calling describe token operation for owners: "
                              f"{_java_list([f'{k}:{n}' for k, n in owners])}")
                    else:
                        print("Calling describe token operation for current user.")
                    resp = wire.send(DescribeDelegationTokenRequest(owners=[
                        DescribeDelegationTokenRequest.DescribeDelegationTokenOwner(principal_type=k, principal_name=n)
                        for k, n in owners] if owners else None))
                    _check(resp.error_code)
                    sys.stdout.write(f"Total number of tokens : {len(resp.tokens)}")
                    _print_tokens([(t.token_id, bytes(t.hmac), f"{t.principal_type}:{t.principal_name}",
                                    f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                                    if t.token_requester_principal_type else f"{t.principal_type}:{t.principal_name}",
                                    [f"{r.principal_type}:{r.principal_name}" for r in t.renewers],
                                    t.issue_timestamp, t.expiry_timestamp, t.max_timestamp) for t in resp.tokens])
            except CliError as exc:
                print(f"Error while executing delegation token command : {exc}")
                return 1
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
