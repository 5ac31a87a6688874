"""Access tokens of the HTTP API: JWTs (HS256, PyJWT) that carry a logged-in session.

Purpose: ``POST /users/login`` (and the token login) opens a session exactly as a TCP
login does, through the node's own handling of a LOGIN_REGISTER frame; the access token
it answers with names that session. Every later request presents the token, and the HTTP
adapter acts in the session it names, as a TCP connection acts in the session it logged
in to.

Invariants:

1. A token is trusted only if its signature checks with this node's key and it has not
   expired; the session it names must still live in committed metadata and belong to
   the client id it names (the node's own session check, ``broker.core.sessions``), so a
   token outlives neither a logout nor its session's end.
2. The key is derived (HMAC-SHA256 with a fixed label, 32 bytes) from
   ``http_token_secret`` if set, else from ``cluster_secret``, so the secret itself never
   signs anything and every node of a cluster accepts a token any of them issued; a node
   with neither draws a key at start, and its tokens die with the process.
3. Claims: ``sub`` (user id, text, as JWT asks), ``uid``, ``cid`` (client id, u128 as
   text), ``sid`` (session), ``iat``, ``exp`` (seconds), ``jti`` (random). Nothing else is
   read from a token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Final

import jwt

from broker.runtime.config import Config

ALGORITHM: Final = "HS256"
KEY_LABEL: Final = b"viewstream http access token key v1"
"""The HMAC label that turns the cluster secret into the token key (invariant 2)."""
LEEWAY_S: Final = 0
"""Clock skew allowed on ``exp`` between nodes: none (nodes of one cluster keep time)."""


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a verified access token says."""

    user_id: int
    client_id: int
    session: int
    expiry_s: int


class TokenError(Exception):
    """The token is missing, malformed, forged or expired; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def derive_key(secret: str) -> bytes:
    """The 32-byte HS256 key made from a configured secret (invariant 2)."""
    return hmac.new(secret.encode(), KEY_LABEL, hashlib.sha256).digest()


def token_key(config: Config) -> bytes:
    """The signing key of ``config``'s node (invariant 2)."""
    secret = config.http_token_secret or config.cluster_secret
    if secret is not None:
        return derive_key(secret.get_secret_value())
    return os.urandom(32)


class TokenIssuer:
    """Issues and verifies access tokens with one key.

    Args:
        key: The HMAC key (``token_key``).
        expiry_s: Lifetime of an issued token.
    """

    def __init__(self, key: bytes, expiry_s: int) -> None:
        self._key = key
        self.expiry_s = expiry_s

    def issue(self, user_id: int, client_id: int, session: int, now_s: int) -> tuple[str, int]:
        """A new token and its expiry (unix seconds)."""
        expiry = now_s + self.expiry_s
        claims = {
            "sub": str(user_id),
            "uid": user_id,
            "cid": str(client_id),
            "sid": session,
            "iat": now_s,
            "exp": expiry,
            "jti": secrets.token_hex(16),
        }
        return jwt.encode(claims, self._key, algorithm=ALGORITHM), expiry

    def verify(self, token: str, now_s: int) -> TokenClaims:
        """The claims of a valid token.

        Raises:
            TokenError: the token does not verify, has expired or lacks a claim.
        """
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                options={"require": ["exp", "sub", "uid", "cid", "sid"], "verify_exp": False},
            )
        except jwt.PyJWTError as error:
            raise TokenError(f"invalid access token: {error}") from None
        try:
            user_id = int(claims["uid"])
            client_id = int(claims["cid"])
            session = int(claims["sid"])
            expiry = int(claims["exp"])
        except (TypeError, ValueError):
            raise TokenError("invalid access token: malformed claims") from None
        if expiry + LEEWAY_S <= now_s:
            raise TokenError("the access token has expired")
        if not (0 < client_id < 1 << 128 and session > 0 and user_id >= 0):
            raise TokenError("invalid access token: claims out of range")
        return TokenClaims(user_id, client_id, session, expiry)
