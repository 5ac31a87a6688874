"""The client side of TLS: one verifying ``ssl.SSLContext`` per client, and the name a
node's certificate must carry.

Invariants:

1. Every TLS connection verifies the node's certificate chain (against ``tls_ca_file``, or
   the system's roots) and its name (``tls_domain``, else the host dialed, as Iggy's SDK
   does); there is no setting that skips verification.
2. TLS 1.2 is the oldest version spoken, as on the node's listener.
3. A CA file that is missing or holds no certificate fails when the client is made
   (:class:`~sdk.errors.InvalidTlsCertificate`), not at each dial.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from sdk.connection_string import ClientConfig, NodeAddress
from sdk.errors import INVALID_TLS_CERTIFICATE_PATH_CODE, InvalidTlsCertificate

__all__ = ["client_context", "server_name"]


def client_context(config: ClientConfig) -> ssl.SSLContext | None:
    """The context every connection of a client wraps its socket in; None without TLS.

    Raises:
        InvalidTlsCertificate: the CA file is missing (65) or unusable (66).
    """
    if not config.tls:
        return None
    ca_file = config.tls_ca_file
    if ca_file is not None and not Path(ca_file).is_file():
        raise InvalidTlsCertificate(
            INVALID_TLS_CERTIFICATE_PATH_CODE, f"tls_ca_file {ca_file!r} is not a file"
        )
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise InvalidTlsCertificate(detail=f"tls_ca_file {ca_file!r}: {error}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    return context


def server_name(config: ClientConfig, address: NodeAddress) -> str:
    """The name the certificate of the node at ``address`` must carry (invariant 1)."""
    return config.tls_domain if config.tls_domain else address.host
