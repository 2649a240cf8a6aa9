"""A small PKI for tests, built with cryptography (SHA-1 through the openssl CLI, which
cryptography no longer signs with)."""

from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DATA = Path(__file__).resolve().parent.parent / "data" / "certs"


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Issued:
    cert: x509.Certificate
    key: Any

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def _name(cn: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "TrustRank tests"),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])


def issue(
    cn: str,
    *,
    issuer: Issued | None = None,
    ca: bool = False,
    path_length: int | None = None,
    uris: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    key: Any = None,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    days: int = 365,
    key_usage: bool = True,
    cert_sign: bool | None = None,
) -> Issued:
    key = key or ec.generate_private_key(ec.SECP256R1())
    start = not_before or now() - dt.timedelta(days=1)
    end = not_after or start + dt.timedelta(days=days)
    subject = _name(cn)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if key_usage:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=not ca, content_commitment=False, key_encipherment=not ca,
                data_encipherment=False, key_agreement=False, key_cert_sign=ca if cert_sign is None else cert_sign, crl_sign=ca,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
    names += [x509.DNSName(d) for d in dns]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    signer = issuer.key if issuer else key
    return Issued(builder.sign(signer, hashes.SHA256()), key)


@dataclass
class Pki:
    root: Issued
    intermediate: Issued
    trust_domain: str

    def leaf(self, path: str, **kwargs: Any) -> Issued:
        return issue(
            path.rsplit("/", 1)[-1] or "leaf",
            issuer=self.intermediate,
            uris=(f"spiffe://{self.trust_domain}{path}",),
            **kwargs,
        )


def make_pki(trust_domain: str = "prod.example") -> Pki:
    root = issue(f"Root CA {trust_domain}", ca=True, path_length=1, days=3650,
                 uris=(f"spiffe://{trust_domain}",))
    intermediate = issue(f"Intermediate CA {trust_domain}", issuer=root, ca=True, path_length=0,
                         days=1825)
    return Pki(root=root, intermediate=intermediate, trust_domain=trust_domain)


def rsa_key(bits: int) -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def sha1_leaf(issuer: Issued, spiffe_id: str) -> bytes:
    """A leaf signed with SHA-1 by `issuer` (which must hold an RSA key), as PEM."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "ca.pem").write_bytes(issuer.pem)
        (folder / "ca.key").write_bytes(issuer.key_pem)
        (folder / "leaf.key").write_bytes(
            ec.generate_private_key(ec.SECP256R1()).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (folder / "ext.cnf").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            f"subjectAltName=URI:{spiffe_id}\n"
        )
        subprocess.run(
            ["openssl", "req", "-new", "-key", "leaf.key", "-subj", "/CN=sha1-leaf",
             "-out", "leaf.csr"],
            cwd=folder, check=True, capture_output=True,
        )
        subprocess.run(
            ["openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", "4242", "-sha1", "-days", "30", "-extfile", "ext.cnf",
             "-out", "leaf.pem"],
            cwd=folder, check=True, capture_output=True,
        )
        # openssl starts validity "now" to the second; back-date by verifying later in tests.
        return (folder / "leaf.pem").read_bytes()


def openssl_verify(
    *, leaf: bytes, anchors: bytes, intermediates: bytes = b"", attime: dt.datetime | None = None,
    extra: tuple[str, ...] = (),
) -> tuple[bool, str]:
    """The independent verdict: `openssl verify` with the bundle as the only CA file."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "ca.pem").write_bytes(anchors)
        (folder / "leaf.pem").write_bytes(leaf)
        # -no-CApath/-no-CAstore: only the bundle is trusted, never the machine's roots.
        args = ["openssl", "verify", "-x509_strict", "-no-CApath", "-no-CAstore",
                "-CAfile", "ca.pem", *extra]
        if intermediates:
            (folder / "untrusted.pem").write_bytes(intermediates)
            args += ["-untrusted", "untrusted.pem"]
        if attime is not None:
            args += ["-attime", str(int(attime.timestamp()))]
        args.append("leaf.pem")
        proc = subprocess.run(args, cwd=folder, capture_output=True, text=True)
        return proc.returncode == 0, proc.stdout + proc.stderr


def data(name: str) -> bytes:
    return (DATA / name).read_bytes()
