"""What the four delegation token handlers (API keys 38-41, KIP-48) share: who may ask for tokens, who is asking,
and running a token write on the active controller.

* :func:`allow_token_requests` is Kafka's ``allowTokenRequests``: tokens are handed out only over an authenticated
  channel: not on PLAINTEXT listeners, not on SSL listeners without a client certificate (principal
  ``User:ANONYMOUS``), and not to a connection that itself authenticated with a delegation token
  (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
* Create, renew and expire are written by the active controller (``QuorumController``), which needs the client's
  principal (the token's requester, the owner/renewer check). A node that is not the active controller forwards the
  request with the client's principal in the forwarding client id (``kbroker-forward-<node>/<principal>``,
  :meth:`MetadataQuorum.forward`); the controller takes that principal only from a request that came in on a
  controller listener, and with an authorizer only from a sender that has CLUSTER_ACTION (as Kafka's controller
  trusts the principal inside an EnvelopeRequest).
"""

from __future__ import annotations

from typing import Any, Callable

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["allow_token_requests", "forwarded_principal", "on_controller", "secret_key"]


def secret_key(ctx: Any) -> str:
    """``delegation.token.secret.key`` of this node (empty: delegation tokens are disabled)."""
    return ctx.broker.config.get("delegation.token.secret.key")


def forwarded_principal(ctx: Any) -> str | None:
    """The client's principal of a token request another node forwarded here (see the module docstring), else
    None."""
    from kbroker.server.handlers.common import _forwarded_by_node
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    client_id = ctx.client_id
    if not client_id.startswith(FORWARDED_PREFIX) or "/" not in client_id:
        return None
    controller_listeners = {n.upper() for n in ctx.broker.config.get_list("controller.listener.names")}
    if ctx.listener_name.upper() not in controller_listeners:
        return None
    authorizer = ctx.broker.authorizer
    if authorizer is not None and not _forwarded_by_node(ctx, authorizer):
        return None
    return client_id.split("/", 1)[1] or None


def allow_token_requests(ctx: Any) -> bool:
    """Whether this connection may create, renew, expire or describe tokens (module docstring)."""
    conn = ctx.connection
    sasl = getattr(conn, "sasl", None)
    if sasl is not None:
        return not sasl.token_authenticated
    security = getattr(conn, "security", None)
    if security is None or not security.tls:
        return False  # PLAINTEXT
    return conn.principal != "User:ANONYMOUS"  # SSL: only with a client certificate


async def on_controller(ctx: Any, request: Any, principal: str, write: Callable[[], Any],
                        failed: Callable[[int], Any]) -> Any:
    """Run ``write()`` (a ``QuorumController`` token method returning the response) here when this node is the
    active controller, or a single node, or the request was forwarded here; wait until its record is committed.
    Otherwise forward ``request`` to the active controller with ``principal``. ``failed(error code)`` is the
    response when neither works (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""
    from kbroker.server.handlers.common import metadata_committed
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    broker = ctx.broker
    quorum = broker.metadata_quorum
    if quorum is not None and not broker.controller.is_active and not ctx.client_id.startswith(FORWARDED_PREFIX):
        try:
            return await quorum.forward(ctx.header.api_key, ctx.api_version, request, ctx.listener_name, principal)
        except KafkaError as exc:
            return failed(exc.code)
    try:
        response = write()
    except KafkaError as exc:
        return failed(exc.code)
    code, _ = await metadata_committed(broker)
    if code != ErrorCode.NONE and getattr(response, "error_code", ErrorCode.NONE) == ErrorCode.NONE:
        return failed(code)
    return response


async def change_expiry(ctx: Any, request: Any, response: Callable[..., Any],
                        change: Callable[[Any, str, bytes], tuple[int, int]]) -> Any:
    """RenewDelegationToken / ExpireDelegationToken: refuse a connection that may not ask for tokens
    (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry -1), else ``change(controller, principal, hmac)`` -> (error code,
    expiry timestamp ms) on the active controller (:func:`on_controller`). ``response``: the API's response class."""
    from kbroker.server.handlers.common import principal_of

    forwarded = forwarded_principal(ctx)
    principal = forwarded or principal_of(ctx)
    if forwarded is None and not allow_token_requests(ctx):
        return response(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=-1)

    def write() -> Any:
        code, expiry = change(ctx.broker.controller, principal, bytes(request.hmac))
        return response(error_code=code, expiry_timestamp_ms=expiry)

    return await on_controller(ctx, request, principal, write,
                               lambda code: response(error_code=code, expiry_timestamp_ms=-1))
