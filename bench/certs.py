"""Throwaway certificates for TLS runs: a CA and leaves signed by it.

Purpose: the chaos tool's TLS replica bus and the TLS tests need a cluster CA and, per
node, a certificate signed by it that serves both ends of a connection (a bus link is
mutual TLS: the dialer presents its certificate too). Made with the ``cryptography``
package when it is installed, else with the ``openssl`` command; with neither,
:func:`make_ca` raises :class:`CertificatesUnavailable` and callers say why they stop.

Invariants:

1. A leaf is never its own CA: rustls (the official SDK) refuses a CA certificate
   presented as a server's own, and a bus peer checks its peer's chain against the CA.
2. Every leaf names ``localhost`` and 127.0.0.1 (the addresses tests and local clusters
   use) and may serve as a server and as a client (extended key usages ``serverAuth`` and
   ``clientAuth``).
3. Keys are EC P-256, certificates valid from 5 minutes ago for ``VALID_DAYS``; private
   keys are written unencrypted with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

VALID_DAYS: Final = 2
LEAF_HOSTS: Final = ("localhost", "127.0.0.1")
OPENSSL_TIMEOUT_S: Final = 60.0


class CertificatesUnavailable(RuntimeError):
    """Neither ``cryptography`` nor the ``openssl`` command is available."""


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA: its certificate (what peers and clients trust) and its signing key."""

    cert: Path
    key: Path
    made_with: str


@dataclass(frozen=True, slots=True)
class Leaf:
    """A certificate signed by a CA, its private key, and that CA's certificate."""

    cert: Path
    key: Path
    ca: Path


def _write_key(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chmod(path, 0o600)


def _has_cryptography() -> bool:
    try:
        import cryptography  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _build_with_cryptography(
    subject: str, issuer_cert: Any | None, issuer_key: Any | None, *, ca: bool
) -> tuple[Any, Any]:
    from cryptography import x509  # type: ignore[import-not-found, unused-ignore]
    from cryptography.hazmat.primitives import (  # type: ignore[import-not-found, unused-ignore]
        hashes,
    )
    from cryptography.hazmat.primitives.asymmetric import (  # type: ignore[import-not-found, unused-ignore]
        ec,
    )
    from cryptography.x509.oid import (  # type: ignore[import-not-found, unused-ignore]
        ExtendedKeyUsageOID,
        NameOID,
    )

    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name if issuer_cert is None else issuer_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        names = [
            x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host)
            for host in LEAF_HOSTS
        ]
        builder = builder.add_extension(
            x509.SubjectAlternativeName(names), critical=False
        ).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    signer = key if issuer_key is None else issuer_key
    return builder.sign(signer, hashes.SHA256()), key


def _pem(cert: Any, key: Any) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import (  # type: ignore[import-not-found, unused-ignore]
        serialization,
    )

    return cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    assert openssl is not None
    subprocess.run(
        [openssl, *args], check=True, capture_output=True, timeout=OPENSSL_TIMEOUT_S, cwd=cwd
    )


_NEW_KEY: Final = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(folder: Path, name: str = "viewstream test CA") -> CertificateAuthority:
    """A new CA in ``folder`` (``ca.pem``, ``ca.key``).

    Raises:
        CertificatesUnavailable: neither ``cryptography`` nor ``openssl`` is there.
    """
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "ca.pem", folder / "ca.key"
    if _has_cryptography():
        made, made_key = _build_with_cryptography(name, None, None, ca=True)
        cert_pem, key_pem = _pem(made, made_key)
        cert.write_bytes(cert_pem)
        _write_key(key, key_pem)
        return CertificateAuthority(cert, key, "cryptography")
    if shutil.which("openssl") is None:
        raise CertificatesUnavailable("neither the cryptography package nor openssl is there")
    _openssl(
        *("req", "-x509", *_NEW_KEY, "-keyout", str(key), "-out", str(cert)),
        *("-days", str(VALID_DAYS), "-subj", f"/CN={name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=folder,
    )
    os.chmod(key, 0o600)
    return CertificateAuthority(cert, key, "openssl")


def make_leaf(ca: CertificateAuthority, folder: Path, name: str) -> Leaf:
    """A leaf for ``localhost``/127.0.0.1 signed by ``ca``: ``{name}.pem``, ``{name}.key``."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    if ca.made_with == "cryptography":
        from cryptography import x509  # type: ignore[import-not-found, unused-ignore]
        from cryptography.hazmat.primitives import (  # type: ignore[import-not-found, unused-ignore]
            serialization,
        )

        issuer = x509.load_pem_x509_certificate(ca.cert.read_bytes())
        issuer_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
        made, made_key = _build_with_cryptography(name, issuer, issuer_key, ca=False)
        cert_pem, key_pem = _pem(made, made_key)
        cert.write_bytes(cert_pem)
        _write_key(key, key_pem)
        return Leaf(cert, key, ca.cert)
    request, extensions = folder / f"{name}.csr", folder / f"{name}.ext"
    names = ",".join(f"IP:{host}" if _is_ip(host) else f"DNS:{host}" for host in LEAF_HOSTS)
    extensions.write_text(
        f"subjectAltName={names}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=critical,digitalSignature\n"
    )
    _openssl(
        *("req", *_NEW_KEY, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}"),
        cwd=folder,
    )
    _openssl(
        *("x509", "-req", "-in", str(request), "-CA", str(ca.cert), "-CAkey", str(ca.key)),
        *("-CAcreateserial", "-out", str(cert), "-days", str(VALID_DAYS)),
        *("-extfile", str(extensions)),
        cwd=folder,
    )
    os.chmod(key, 0o600)
    return Leaf(cert, key, ca.cert)


def make_cluster(folder: Path, count: int) -> tuple[CertificateAuthority, list[Leaf]]:
    """A cluster CA and one leaf per node (``node-0`` ...), all in ``folder``."""
    ca = make_ca(folder, "viewstream cluster CA")
    return ca, [make_leaf(ca, folder, f"node-{index}") for index in range(count)]


__all__ = [
    "LEAF_HOSTS",
    "CertificateAuthority",
    "CertificatesUnavailable",
    "Leaf",
    "make_ca",
    "make_cluster",
    "make_leaf",
]
