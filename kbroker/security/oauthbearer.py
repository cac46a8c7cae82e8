"""SASL/OAUTHBEARER (KIP-255, RFC 7628) on the server side, with Kafka's two validators.

The client's initial response is ``n,[a=authzid],`` then ``\\x01``-separated ``key=value`` pairs, one of them
``auth=Bearer <token>``, ending with ``\\x01\\x01``. A valid token authenticates ``User:<principal claim>``; an
invalid one is answered with RFC 7628's JSON error challenge (``{"status":"invalid_token"}``), the client sends
``\\x01`` and the authentication fails with that message, as Kafka's ``OAuthBearerSaslServer`` does.

Validators (the listener's ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``):

* default, Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: an unsecured JWT (``alg`` ``none``, no
  signature) with the principal claim (``sub``, or the JAAS option ``unsecuredValidatorPrincipalClaimName``) and
  ``exp`` in the future (``unsecuredValidatorAllowableClockSkewMs``, default 0); ``unsecuredValidatorRequiredScope``
  names scopes the ``scope`` claim must hold. Meant for development, as in Kafka;
* ``org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler`` (KIP-768): a signed JWT
  checked against the keys at ``sasl.oauthbearer.jwks.endpoint.url`` (``https://``, ``http://`` or ``file:``;
  fetched at start-up and again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` or when a token names an
  unknown key id), ``sasl.oauthbearer.expected.audience``, ``sasl.oauthbearer.expected.issuer``,
  ``sasl.oauthbearer.clock.skew.seconds``, the principal from ``sasl.oauthbearer.sub.claim.name`` (``sub``).
  Signature checking is PyJWT's.

The session ends no later than the token's ``exp`` when ``connections.max.reauth.ms`` is set (KIP-368).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.request
from typing import Any, Callable, Mapping

from kbroker.security.sasl import AuthenticationFailed, MechanismServer, SaslConfigError, parse_jaas

log = logging.getLogger(__name__)

OAUTHBEARER = "OAUTHBEARER"
JWKS_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"


class InvalidToken(Exception):
    """The token does not validate; ``status`` / ``scope`` go into RFC 7628's error challenge."""

    def __init__(self, message: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope


#: token -> (principal, expiry in epoch ms or None); raises InvalidToken
Validator = Callable[[str], "tuple[str, int | None]"]


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def unsecured_validator(options: Mapping[str, str]) -> Validator:
    principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub"
    scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope") or "scope"
    skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
    required = [s for s in options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split() if s]

    def validate(token: str) -> tuple[str, int | None]:
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            raise InvalidToken("Unsecured token must have 3 parts, the last one empty (no signature)")
        try:
            header, claims = json.loads(_b64url(parts[0])), json.loads(_b64url(parts[1]))
        except (ValueError, UnicodeDecodeError):
            raise InvalidToken("Unsecured token is not base64url-encoded JSON") from None
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            raise InvalidToken("Unsecured token must have alg 'none'")
        principal = claims.get(principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"No principal claim '{principal_claim}' in the token")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise InvalidToken("No expiration time claim 'exp' in the token")
        now_ms = time.time() * 1000
        if exp * 1000 + skew_ms < now_ms:
            raise InvalidToken(f"The token expired at {int(exp * 1000)} ms")
        scopes = claims.get(scope_claim, [])
        scopes = scopes.split() if isinstance(scopes, str) else scopes if isinstance(scopes, list) else []
        missing = [s for s in required if s not in scopes]
        if missing:
            raise InvalidToken(f"The token lacks the required scope(s) {missing}", "insufficient_scope",
                               " ".join(required))
        return principal, int(exp * 1000)

    return validate


class JwksValidator:
    """Signed JWTs against a JWKS (KIP-768 semantics); the key set is refreshed by a background thread."""

    def __init__(self, get: Callable[[str], str]) -> None:
        import jwt

        self._jwt = jwt
        self.url = get("sasl.oauthbearer.jwks.endpoint.url").strip()
        if not self.url:
            raise SaslConfigError("OAuthBearerValidatorCallbackHandler needs sasl.oauthbearer.jwks.endpoint.url")
        self.audience = [a.strip() for a in get("sasl.oauthbearer.expected.audience").split(",") if a.strip()]
        self.issuer = get("sasl.oauthbearer.expected.issuer").strip() or None
        self.sub_claim = get("sasl.oauthbearer.sub.claim.name").strip() or "sub"
        self.skew_s = int(get("sasl.oauthbearer.clock.skew.seconds") or 30)
        self.refresh_s = int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3600000) / 1000
        self._keys: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._last_fetch = 0.0
        self._fetch()  # at start-up: an unreachable JWKS is a start-up error, as in Kafka
        threading.Thread(target=self._refresh_loop, name="kbroker-jwks-refresh", daemon=True).start()

    def _fetch(self) -> None:
        try:
            if self.url.startswith("file:"):
                path = self.url[len("file://"):] if self.url.startswith("file://") else self.url[len("file:"):]
                with open(path, "rb") as f:
                    data = f.read()
            else:
                with urllib.request.urlopen(self.url, timeout=10) as resp:  # noqa: S310 - the operator's URL
                    data = resp.read()
            keys = self._jwt.PyJWKSet.from_json(data.decode()).keys
        except Exception as exc:  # noqa: BLE001 - network, file, JSON or key errors
            raise SaslConfigError(f"cannot load the JWKS at sasl.oauthbearer.jwks.endpoint.url {self.url}: "
                                  f"{exc}") from None
        with self._lock:
            self._keys = {k.key_id or "": k for k in keys}
            self._last_fetch = time.monotonic()

    def _refresh_loop(self) -> None:
        while True:
            time.sleep(self.refresh_s)
            try:
                self._fetch()
            except SaslConfigError as exc:
                log.warning("%s (keeping the keys fetched before)", exc)

    def __call__(self, token: str) -> tuple[str, int | None]:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"Malformed token: {exc}") from None
        kid = header.get("kid") or ""
        with self._lock:
            key = self._keys.get(kid)
        if key is None and time.monotonic() - self._last_fetch > 5:  # a rotated key: look again, at most every 5 s
            try:
                self._fetch()
            except SaslConfigError as exc:
                log.warning("%s", exc)
            with self._lock:
                key = self._keys.get(kid)
        if key is None:
            raise InvalidToken(f"No key with id {kid!r} in the JWKS")
        try:
            claims = jwt.decode(token, key.key, algorithms=[header.get("alg", "RS256")],
                                audience=self.audience or None, issuer=self.issuer, leeway=self.skew_s,
                                options={"require": ["exp"], "verify_aud": bool(self.audience)})
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"The token does not validate: {exc}") from None
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidToken(f"No principal claim '{self.sub_claim}' in the token")
        return principal, int(claims["exp"] * 1000)


def validator_for(get: Callable[[str], str]) -> Validator:
    """The listener's validator from its OAUTHBEARER keys; raises :class:`SaslConfigError`."""
    handler = get("oauthbearer.sasl.server.callback.handler.class").strip()
    if handler == JWKS_VALIDATOR:
        return JwksValidator(get)
    if handler not in ("", UNSECURED_VALIDATOR):
        raise SaslConfigError(f"listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class={handler}: "
                              f"kbroker has {JWKS_VALIDATOR} and (the default) {UNSECURED_VALIDATOR}")
    text = get("oauthbearer.sasl.jaas.config") or get("sasl.jaas.config")
    options = parse_jaas(text).options if text else {}
    return unsecured_validator(options)


class OAuthBearerServer(MechanismServer):
    """One OAUTHBEARER exchange (RFC 7628 section 3.2)."""

    def __init__(self, validator: Validator) -> None:
        self.validator = validator
        self._error: str | None = None
        #: epoch ms at which the token expires (bounds the session, KIP-368)
        self.expires_at_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        if self._error is not None:  # the client acknowledged the error challenge (a single %x01)
            raise AuthenticationFailed(f"Authentication failed: {self._error}")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: not UTF-8") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        authzid = ""
        for part in gs2.split(",")[1:]:
            if part.startswith("a="):
                authzid = part[2:].replace("=2C", ",").replace("=3D", "=")
        pairs = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01") if kv)
        auth = pairs.get("auth", "")
        if not auth.lower().startswith("bearer "):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no 'auth=Bearer <token>'")
        try:
            principal, expires = self.validator(auth[len("bearer "):].strip())
        except InvalidToken as exc:
            challenge = {"status": exc.status}
            if exc.scope:
                challenge["scope"] = exc.scope
            self._error = json.dumps(challenge)
            log.info("OAUTHBEARER token refused: %s", exc)
            return self._error.encode()
        if authzid and authzid != principal:
            raise AuthenticationFailed(f"Authentication failed: Client requested an authorization id ({authzid}) "
                                       f"that is different from the token's principal name ({principal})")
        self.username, self.expires_at_ms, self.complete = principal, expires, True
        return b""
