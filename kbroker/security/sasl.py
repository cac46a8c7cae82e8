"""SASL authentication of client connections (issue 11, item 2): the mechanisms and the per-connection state
machine that SaslHandshake / SaslAuthenticate drive (KIP-43, KIP-152, KIP-84 for SCRAM).

Mechanisms: ``PLAIN`` (RFC 4616: users from the listener's JAAS configuration, Kafka's ``PlainLoginModule`` with
``user_<name>="<password>"`` options), ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802/7677 through
``scramp``; credentials are the ``UserScramCredentialRecord``\\ s of the metadata image, see KIP-554) and
``OAUTHBEARER`` (:mod:`kbroker.security.oauthbearer`). GSSAPI (Kerberos) is not implemented. SCRAM also
authenticates with a delegation token (KIP-48): the ``tokenauth=true`` extension, the token id as user name and the
token's HMAC (base64) as password; the principal is the token's owner.

The listener's keys, Kafka's names, read per listener first (``listener.name.<listener>.<key>``):

* ``sasl.enabled.mechanisms`` (Kafka's default ``GSSAPI``; a SASL listener must enable a mechanism kbroker has);
* ``listener.name.<listener>.<mechanism in lower case>.sasl.jaas.config``, else ``sasl.jaas.config``: the JAAS
  line of the mechanism's login module. For PLAIN its ``user_<name>`` options are the users; ``username`` /
  ``password`` are this node's own credentials when it connects to such a listener;
* ``connection.failed.authentication.delay.ms`` (Kafka's default 100): a failed authentication is answered
  after this delay, then the connection is closed;
* ``sasl.server.max.receive.size`` (524288): a larger token before authentication closes the connection.

The flow (Kafka's ``SaslServerAuthenticator``): before authentication a connection may send ApiVersions and
SaslHandshake; SaslHandshake names a mechanism (UNSUPPORTED_SASL_MECHANISM with the enabled list otherwise);
then the mechanism's tokens come in SaslAuthenticate requests (handshake v1) or as bare size-prefixed frames
(handshake v0). Any other request before authentication closes the connection, as does a failed
authentication (after SASL_AUTHENTICATION_FAILED with a message, for SaslAuthenticate).
"""

from __future__ import annotations

import enum
import hmac
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

from kbroker.config import ConfigException

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
#: Kafka's ScramMechanism type codes (UserScramCredentialRecord.mechanism)
SCRAM_MECHANISMS = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)


class AuthenticationFailed(Exception):
    """The client's credentials are not accepted; the message is what the client is told."""


class SaslConfigError(ConfigException):
    """A SASL setting the listener cannot be served with."""


# ------------------------------------------------------------------------------------------------ JAAS
_JAAS = re.compile(r"^\s*(\S+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;?\s*$", re.S)
_OPTION = re.compile(r"""\s*([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))""")


@dataclass(frozen=True)
class JaasConfig:
    """One JAAS login module line: ``<module class> required key="value" ...;``."""

    module: str
    options: Mapping[str, str]


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasConfig:
    """Parse one ``sasl.jaas.config`` value; raises :class:`SaslConfigError`."""
    m = _JAAS.match(text or "")
    if m is None:
        raise SaslConfigError(f"Invalid value for configuration {key}: expected '<LoginModule class> required "
                              f"key=\"value\" ...;'")
    options: dict[str, str] = {}
    rest = m.group(3)
    pos = 0
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        om = _OPTION.match(rest, pos)
        if om is None:
            raise SaslConfigError(f"Invalid value for configuration {key}: cannot parse the options at "
                                  f"{rest[pos:pos + 30]!r}")
        value = om.group(2) if om.group(2) is not None else om.group(3)
        options[om.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = om.end()
    return JaasConfig(m.group(1), options)


# ------------------------------------------------------------------------------------------ mechanisms
class MechanismServer:
    """One authentication exchange: :meth:`step` takes the client's token and returns the server's (``b""``
    when it has none); :attr:`complete` once the exchange is done and :attr:`username` who it was."""

    complete = False
    username: str | None = None
    #: the user name the client claimed, known before the credentials are checked (for the log of a failure)
    claimed: str | None = None

    def step(self, token: bytes) -> bytes:
        raise NotImplementedError


class PlainServer(MechanismServer):
    """RFC 4616 ``[authzid] NUL authcid NUL passwd`` against ``users`` (name -> password)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        self.claimed = user or None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.username, self.complete = user, True
        return b""


#: (user, mechanism code) -> (salt, stored_key, server_key, iterations), None when the user has none
CredentialLookup = Callable[[str, int], "tuple[bytes, bytes, bytes, int] | None"]
#: (delegation token id, mechanism code) -> ((salt, stored_key, server_key, iterations), owner's name, expiry epoch
#: ms), None when there is no such token (KIP-48; ``kbroker.controller.delegation_token_control.token_lookup``)
TokenLookup = Callable[[str, int], "tuple[tuple[bytes, bytes, bytes, int], str, int] | None"]
#: the SCRAM extensions a server accepts (Kafka's ``ScramSaslServer``): ``tokenauth``
SCRAM_EXTENSIONS = frozenset({"tokenauth"})


def _scram_unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer(MechanismServer):
    """RFC 5802 server side (two round trips) through ``scramp``; credentials from ``lookup``.

    The client-first message may carry SCRAM extensions after ``r=`` (RFC 5802 section 7, KIP-84): ``tokenauth=true``
    authenticates with a delegation token (KIP-48): the user name is the token id, the credential comes from
    ``token_lookup`` and the authenticated user is the token's owner (:attr:`token_authenticated`). An unknown
    extension fails the exchange, as in Kafka."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, token_lookup: TokenLookup | None = None) -> None:
        import scramp

        self.mechanism = mechanism
        self._code = SCRAM_MECHANISMS[mechanism]
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._stage = 0
        self._user: str | None = None
        #: True once the exchange authenticated with a delegation token (``tokenauth=true``)
        self.token_authenticated = False
        self._token_owner: str | None = None
        #: a token's expiry (epoch ms): a session with ``connections.max.reauth.ms`` ends no later (KIP-368)
        self.expires_at_ms: int | None = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        if self.token_authenticated:
            found = self._token_lookup(_scram_unescape(username), self._code) if self._token_lookup else None
            if found is None:
                raise AuthenticationFailed("unknown token")
            cred, self._token_owner, self.expires_at_ms = found
            return cred
        cred = self._lookup(_scram_unescape(username), self._code)
        if cred is None:
            raise AuthenticationFailed("unknown user")
        return cred

    def _client_first(self, text: str) -> str:
        """``text`` with its extensions taken off (scramp knows none); sets :attr:`token_authenticated`."""
        head, sep, bare = text.partition(",")
        gs2_rest, sep2, bare = bare.partition(",")
        if not sep or not sep2:
            return text
        attrs = bare.split(",")
        ext = attrs[2:]
        if not ext:
            return text
        extensions = dict(a.split("=", 1) if "=" in a else (a, "") for a in ext)
        if not set(extensions) <= SCRAM_EXTENSIONS:
            raise AuthenticationFailed("Unsupported extensions")
        self.token_authenticated = extensions.get("tokenauth", "").lower() == "true"
        return f"{head},{gs2_rest},{','.join(attrs[:2])}"

    def _failed(self) -> AuthenticationFailed:
        return AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials with "
                                    f"SASL mechanism {self.mechanism}")

    def step(self, token: bytes) -> bytes:
        import scramp

        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed() from None
        try:
            if self._stage == 0:
                m = re.search(r"(?:^|,)n=([^,]*)", text.split(",", 2)[2] if text.count(",") >= 2 else "")
                self._user = self.claimed = _scram_unescape(m.group(1)) if m else None
                stripped = self._client_first(text)
                self._server.set_client_first(stripped)
                if stripped != text:  # the proofs cover the client-first-message-bare as sent, extensions included
                    self._server.client_first_bare = text.split(",", 2)[2]
                if self.token_authenticated:
                    self._user = self._token_owner
                self._stage = 1
                return self._server.get_server_first().encode()
            if self._stage == 1:
                # the final message's r= must be the server's nonce: librdkafka before 2.6.1 sends the client
                # nonce twice there (librdkafka #4895) and is refused, as Kafka 4.3 refuses it
                self._server.set_client_final(text)
                final = self._server.get_server_final()
                self._stage = 2
                self.username, self.complete = self._user, True
                return final.encode()
        except (scramp.ScramException, AuthenticationFailed, ValueError, IndexError):
            raise self._failed() from None
        raise AuthenticationFailed("Unexpected SASL token after the SCRAM exchange completed")


# ------------------------------------------------------------------------------------------ per listener
@dataclass
class SaslListenerConfig:
    """What a SASL listener accepts: its enabled mechanisms and, for PLAIN, its users."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    failed_delay_s: float = 0.1
    max_receive_size: int = 524288
    #: OAUTHBEARER's token validator (:func:`kbroker.security.oauthbearer.validator_for`)
    oauth_validator: Any = None

    @classmethod
    def of(cls, get: Callable[[str], str], listener: str) -> SaslListenerConfig:
        """From a per-listener getter (``listener.name.<l>.<key>`` first); raises :class:`SaslConfigError`."""
        mechanisms = tuple(m.strip().upper() for m in get("sasl.enabled.mechanisms").split(",") if m.strip())
        usable = tuple(m for m in mechanisms if m in SUPPORTED_MECHANISMS)
        if not usable:
            raise SaslConfigError(f"listener {listener} uses SASL but enables no mechanism kbroker has "
                                  f"(sasl.enabled.mechanisms={','.join(mechanisms) or '(empty)'}; kbroker has "
                                  f"{', '.join(SUPPORTED_MECHANISMS)})")
        users: dict[str, str] = {}
        if PLAIN in usable:
            text = get("plain.sasl.jaas.config") or get("sasl.jaas.config")
            if not text:
                raise SaslConfigError(f"listener {listener} enables PLAIN but has no JAAS configuration: set "
                                      f"listener.name.{listener.lower()}.plain.sasl.jaas.config")
            jaas = parse_jaas(text, f"listener.name.{listener.lower()}.plain.sasl.jaas.config")
            users = {k[len("user_"):]: v for k, v in jaas.options.items() if k.startswith("user_")}
        validator = None
        if OAUTHBEARER in usable:
            from kbroker.security.oauthbearer import validator_for

            validator = validator_for(get)
        try:
            delay = int(get("connection.failed.authentication.delay.ms") or 100)
            max_size = int(get("sasl.server.max.receive.size") or 524288)
        except ValueError as exc:
            raise SaslConfigError(str(exc)) from None
        return cls(listener, usable, users, delay / 1000, max_size, validator)

    def server(self, mechanism: str, lookup: CredentialLookup,
               token_lookup: TokenLookup | None = None) -> MechanismServer:
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        if mechanism == OAUTHBEARER:
            from kbroker.security.oauthbearer import OAuthBearerServer

            return OAuthBearerServer(self.oauth_validator)
        return ScramServer(mechanism, lookup, token_lookup)


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # tokens of the chosen mechanism expected
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslAuthenticator:
    """The SASL state of one connection. Handlers call :meth:`handshake` and :meth:`authenticate`; the network
    layer asks :attr:`raw_tokens` (handshake v0: tokens come as bare frames) and :meth:`allows` (which API
    keys may be sent before authentication)."""

    API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

    def __init__(self, config: SaslListenerConfig, lookup: CredentialLookup,
                 token_lookup: TokenLookup | None = None) -> None:
        self.config = config
        self.lookup = lookup
        self.token_lookup = token_lookup
        #: the connection authenticated with a delegation token (KIP-48): it may not ask for tokens itself
        self.token_authenticated = False
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False
        self._server: MechanismServer | None = None
        self.principal: str | None = None
        #: epoch ms when the credential expires (an OAUTHBEARER token's exp, a delegation token's expiry), None when
        #: it does not
        self.credential_expires_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def claimed_principal(self) -> str | None:
        """``User:<name>`` the client claimed in the exchange under way or just failed (None before it named one,
        or for a mechanism that names none before its credentials are checked)."""
        claimed = self._server.claimed if self._server is not None else None
        return f"User:{claimed}" if claimed else self.principal

    def allows(self, api_key: int) -> bool:
        """May a request of ``api_key`` be handled now (before authentication only the SASL ones and
        ApiVersions)?"""
        if self.state is SaslState.AUTHENTICATED:
            return True  # a stray SaslAuthenticate is answered ILLEGAL_SASL_STATE by its handler, as Kafka's
        if self.state is SaslState.HANDSHAKE:
            return api_key in (self.API_VERSIONS, self.SASL_HANDSHAKE)
        if self.state is SaslState.AUTHENTICATE:
            return api_key == self.SASL_AUTHENTICATE and not self.raw_tokens
        return False

    def handshake(self, mechanism: str, version: int) -> bool:
        """SaslHandshake: True when ``mechanism`` is enabled (the exchange starts), else False (the client is
        told the enabled ones and the connection stays in the handshake state). On an authenticated connection
        this starts a re-authentication (KIP-368: handshake v1 and the same mechanism only)."""
        if mechanism not in self.config.mechanisms:
            return False
        if self.state is SaslState.AUTHENTICATED and (version == 0 or mechanism != self.mechanism):
            return False
        self.mechanism = mechanism
        self._server = self.config.server(mechanism, self.lookup, self.token_lookup)
        self.state = SaslState.AUTHENTICATE
        self.raw_tokens = version == 0
        return True

    def authenticate(self, token: bytes) -> bytes:
        """One client token; returns the server's. Raises :class:`AuthenticationFailed` (the state is FAILED)."""
        assert self._server is not None and self.state is SaslState.AUTHENTICATE
        try:
            out = self._server.step(token)
        except AuthenticationFailed:
            self.state = SaslState.FAILED
            raise
        if self._server.complete:
            principal = f"User:{self._server.username}"
            if self.principal is not None and principal != self.principal:
                self.state = SaslState.FAILED
                raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"{self.principal}: {principal}")
            self.state = SaslState.AUTHENTICATED
            self.raw_tokens = False
            self.principal = principal
            self.credential_expires_ms = getattr(self._server, "expires_at_ms", None)
            self.token_authenticated = bool(getattr(self._server, "token_authenticated", False))
        return out


def scram_lookup(image_of: Callable[[], Any]) -> CredentialLookup:
    """A credential lookup over the metadata image's ``scram_credentials`` ((user, mechanism code) ->
    ``ScramCredential``)."""

    def lookup(user: str, code: int) -> tuple[bytes, bytes, bytes, int] | None:
        creds = getattr(image_of(), "scram_credentials", None) or {}
        cred = creds.get((user, code))
        if cred is None:
            return None
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    return lookup


# ------------------------------------------------------------------------------------------ client side
@dataclass(frozen=True)
class SaslClientConfig:
    """How this process authenticates to a SASL listener: mechanism and credentials (from the JAAS
    ``username`` / ``password`` options, as Kafka's clients and inter-broker connections take them)."""

    mechanism: str
    username: str
    password: str

    def exchange(self) -> ClientExchange:
        return ClientExchange(self)


class ClientExchange:
    """The client's side of one exchange: :meth:`first` token, then :meth:`step` with each server token until
    :attr:`complete`. Raises :class:`AuthenticationFailed` when the server's answer does not verify."""

    def __init__(self, cfg: SaslClientConfig) -> None:
        self.cfg = cfg
        self.complete = False
        self._scram: Any = None

    def first(self) -> bytes:
        if self.cfg.mechanism == PLAIN:
            return b"\x00" + self.cfg.username.encode() + b"\x00" + self.cfg.password.encode()
        import scramp

        self._scram = scramp.ScramClient([self.cfg.mechanism], self.cfg.username, self.cfg.password)
        return self._scram.get_client_first().encode()

    def step(self, server_token: bytes) -> bytes | None:
        """The next client token (None: nothing more to send; the exchange is complete)."""
        import scramp

        if self.cfg.mechanism == PLAIN:
            self.complete = True
            return None
        try:
            if self._scram.stage is scramp.core.ClientStage.get_client_first:
                self._scram.set_server_first(server_token.decode())
                return self._scram.get_client_final().encode()
            self._scram.set_server_final(server_token.decode())
        except scramp.ScramException as exc:
            raise AuthenticationFailed(f"the server's SCRAM answer does not verify: {exc}") from None
        self.complete = True
        return None


def client_requests(cfg: SaslClientConfig) -> Generator[tuple[Any, int], Any, None]:
    """One client-side authentication, sans I/O (KIP-152 framing): yields ``(request, version)`` pairs,
    SaslHandshake v1 then SaslAuthenticate v2 until the exchange completes; the caller sends each and passes the
    decoded response back with ``send``. Raises :class:`AuthenticationFailed` with the broker's message when the
    mechanism or the credentials are refused, or the server's answer does not verify."""
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest

    hs = yield SaslHandshakeRequest(mechanism=cfg.mechanism), 1
    if hs.error_code != ErrorCode.NONE:
        raise AuthenticationFailed(f"SASL mechanism {cfg.mechanism} not accepted ({ErrorCode(hs.error_code).name}; "
                                   f"offered: {', '.join(hs.mechanisms)})")
    exchange = cfg.exchange()
    token: bytes | None = exchange.first()
    while token is not None:
        resp = yield SaslAuthenticateRequest(auth_bytes=token), 2
        if resp.error_code != ErrorCode.NONE:
            raise AuthenticationFailed(resp.error_message or ErrorCode(resp.error_code).name)
        token = exchange.step(bytes(resp.auth_bytes))


def client_config(get: Callable[[str], str], mechanism_key: str) -> SaslClientConfig:
    """This node's credentials for a SASL listener: the mechanism named by ``mechanism_key``
    (``sasl.mechanism.inter.broker.protocol`` / ``sasl.mechanism.controller.protocol``) and the ``username`` /
    ``password`` of that mechanism's JAAS line on the listener. Raises :class:`SaslConfigError`."""
    mechanism = get(mechanism_key).strip().upper()
    if mechanism not in (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512):
        raise SaslConfigError(f"{mechanism_key}={mechanism}: kbroker's own connections authenticate with "
                              f"{PLAIN}, {SCRAM_SHA_256} or {SCRAM_SHA_512}")
    text = get(f"{mechanism.lower()}.sasl.jaas.config") or get("sasl.jaas.config")
    opts = parse_jaas(text).options if text else {}
    if "username" not in opts or "password" not in opts:
        raise SaslConfigError(f"{mechanism_key}={mechanism} needs username and password in the listener's "
                              f"{mechanism.lower()}.sasl.jaas.config")
    return SaslClientConfig(mechanism, opts["username"], opts["password"])
