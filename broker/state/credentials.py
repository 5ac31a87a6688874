"""Password hashing for users (scrypt with a salt the caller supplies), and the hash of a
personal access token.

The state machines never see a clear password and never draw a salt. The primary (the
runtime, before it proposes ``CreateUser``, ``ChangePassword`` or the root user) draws a
fresh salt from the OS, hashes the password with :func:`hash_password`, and carries the
resulting :class:`PasswordHash` in the command; every replica then stores the same bytes.
Login checks a clear password against the committed hash with :func:`verify_password`
before the runtime proposes a ``Register``.

Invariants:

1. :func:`hash_password` is a pure function of (password, salt, cost): no clock, no OS
   randomness, so replicas and tests reproduce it exactly.
2. A stored hash always carries the cost parameters it was made with, so raising the
   default cost later never locks out existing users.
3. A personal access token is stored as :func:`token_hash`, SHA-256 of its text, unsalted
   and fast: the node draws a token from 256 bits of OS randomness, so unlike a password it
   cannot be guessed from its hash, and a login can find its token by the hash alone (one
   dictionary lookup, no per-token work). Iggy hashes its tokens the same way (BLAKE3, not
   in the standard library); the hash never travels to clients, so the choice is ours.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

SALT_SIZE_BYTES = 16
TOKEN_HASH_SIZE_BYTES = 32
HASH_SIZE_BYTES = 32
# scrypt cost (RFC 7914): N = 2**14, r = 8, p = 1 costs about 16 MiB and tens of
# milliseconds, the interactive-login setting the RFC suggests.
SCRYPT_N_DEFAULT = 1 << 14
SCRYPT_R_DEFAULT = 8
SCRYPT_P_DEFAULT = 1
# Bounds on costs accepted from a command, so a hostile or corrupt value cannot make every
# replica spend unbounded memory at login.
SCRYPT_N_MAX = 1 << 20
SCRYPT_R_MAX = 32
SCRYPT_P_MAX = 16


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """An scrypt hash with its salt and cost parameters."""

    salt: bytes
    hash: bytes
    n: int = SCRYPT_N_DEFAULT
    r: int = SCRYPT_R_DEFAULT
    p: int = SCRYPT_P_DEFAULT

    def to_plain(self) -> list[Any]:
        """``[salt, hash, n, r, p]``, ready for CBOR."""
        return [self.salt, self.hash, self.n, self.r, self.p]

    @classmethod
    def from_plain(cls, item: Any) -> PasswordHash:
        """The inverse of :meth:`to_plain`.

        Raises:
            TypeError: the value is not an encoding :meth:`to_plain` produces.
        """
        if not isinstance(item, list) or len(item) != 5:
            raise TypeError("malformed password hash")
        salt, digest, n, r, p = item
        if not isinstance(salt, bytes) or not isinstance(digest, bytes):
            raise TypeError("malformed password hash")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, r, p)):
            raise TypeError("malformed password hash cost")
        return cls(salt, digest, n, r, p)

    def is_well_formed(self) -> bool:
        """Whether the parameters are ones :func:`verify_password` will accept."""
        return (
            1 <= len(self.salt) <= 64
            and len(self.hash) == HASH_SIZE_BYTES
            and 2 <= self.n <= SCRYPT_N_MAX
            and self.n & (self.n - 1) == 0
            and 1 <= self.r <= SCRYPT_R_MAX
            and 1 <= self.p <= SCRYPT_P_MAX
        )


def hash_password(
    password: str,
    salt: bytes,
    *,
    n: int = SCRYPT_N_DEFAULT,
    r: int = SCRYPT_R_DEFAULT,
    p: int = SCRYPT_P_DEFAULT,
) -> PasswordHash:
    """Hash ``password`` with ``salt`` (drawn by the caller) at the given scrypt cost."""
    assert len(salt) >= 1
    digest = hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=_maxmem(n, r, p),
        dklen=HASH_SIZE_BYTES,
    )
    result = PasswordHash(salt=salt, hash=digest, n=n, r=r, p=p)
    assert result.is_well_formed()
    return result


def verify_password(stored: PasswordHash, password: str) -> bool:
    """Whether ``password`` matches ``stored``, compared in constant time."""
    if not stored.is_well_formed():
        return False
    candidate = hashlib.scrypt(
        password.encode("utf-8"),
        salt=stored.salt,
        n=stored.n,
        r=stored.r,
        p=stored.p,
        maxmem=_maxmem(stored.n, stored.r, stored.p),
        dklen=HASH_SIZE_BYTES,
    )
    return hmac.compare_digest(candidate, stored.hash)


def _maxmem(n: int, r: int, p: int) -> int:
    # scrypt needs about 128 * r * (n + p) bytes; OpenSSL's default cap (32 MiB) is too small
    # for the upper cost bounds, so name the real need plus slack.
    return 128 * r * (n + p) + (1 << 20)


def token_hash(token: str) -> bytes:
    """The stored form of a personal access token: SHA-256 of its UTF-8 text (invariant 3)."""
    digest = hashlib.sha256(token.encode("utf-8")).digest()
    assert len(digest) == TOKEN_HASH_SIZE_BYTES
    return digest
