"""Mutual TLS for a run: a per-run CA, one certificate per role, and who may call what.

The controller makes the PKI when a run starts (:func:`make_pki`): a CA whose private key is
never written (no certificate can be minted after the run started) and a certificate for each
role, its common name the role: ``peer`` (every peer process), ``controller`` and ``loadgen``
(Locust). Each carries the DNS name ``overlaylab.<role>``; channels verify a server against
:data:`TARGET_NAME` (the peers' name), so a peer is reached by any address and a controller's or
Locust's key cannot serve as a peer (only the peers' certificate is for server authentication). Servers require a client certificate from
the run's CA; a client without one is refused in the TLS handshake (it sees UNAVAILABLE). An
authenticated client whose role may not call the method is refused with PERMISSION_DENIED,
counted (``unauthorized``) and logged (:data:`ALLOWED`).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROLES = ("peer", "controller", "loadgen")
TARGET_NAME = "overlaylab.peer"
VALID_DAYS = 7
"""Validity of a run's certificates (a run is hours; the CA key is gone once they are made)."""

PEER_SERVICE = {"peer"}
"""Roles that may call the Peer service (gossip, events, probes)."""
ALLOWED = {"Publish": {"controller", "loadgen"}}
"""Control methods open to more roles than the controller; every other one is the controller's."""


def control_roles(method: str) -> set[str]:
    return ALLOWED.get(method, {"controller"})


CALLER_TOKEN_ENV = "OVERLAYLAB_CALLER_TOKEN"
"""A secret the local controller hands its peers and Locust (in their environment, which no
other user can read): the calls of the run's own controller and load carry it."""
CALLER_KEY = "x-overlaylab-caller"
CHANGES_PLAN = frozenset({"Publish", "Join", "Leave", "Subscribe", "Unsubscribe", "SetLinkRules"})
"""Control methods that change what a run does: a peer given a caller token counts the calls
of these without it (``unplanned.<Method>``), which the controller records in the timeline."""


class CallerToken(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds the run's caller token to every call of a channel."""

    def __init__(self, token: str) -> None:
        self.metadata = ((CALLER_KEY, token),)

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        details = client_call_details._replace(metadata=(*(client_call_details.metadata or ()), *self.metadata))
        return await continuation(details, request)


@dataclass(frozen=True)
class Credentials:
    """One role's certificate and key, and the run's CA certificate (all PEM)."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, pki: str | Path, role: str) -> Credentials:
        pki = Path(pki)
        return cls((pki / "ca.pem").read_bytes(), (pki / f"{role}.pem").read_bytes(), (pki / f"{role}.key").read_bytes())

    def server(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True)

    def channel(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)


def aio_channel(addr: str, creds: Credentials | None, options: list | tuple = (), caller_token: str | None = None) -> grpc.aio.Channel:
    """An asyncio channel to ``addr``: mutual TLS with ``creds``, plaintext without; every call
    carrying ``caller_token`` if given."""
    interceptors = [CallerToken(caller_token)] if caller_token else None
    if creds is None:
        return grpc.aio.insecure_channel(addr, options=list(options), interceptors=interceptors)
    return grpc.aio.secure_channel(addr, creds.channel(), options=[*options, ("grpc.ssl_target_name_override", TARGET_NAME)],
                                   interceptors=interceptors)


def channel(addr: str, creds: Credentials | None) -> grpc.Channel:
    """The blocking counterpart of :func:`aio_channel` (Locust users)."""
    if creds is None:
        return grpc.insecure_channel(addr)
    return grpc.secure_channel(addr, creds.channel(), options=[("grpc.ssl_target_name_override", TARGET_NAME)])


def role_of(context: grpc.aio.ServicerContext) -> str | None:
    """The role (certificate common name) of the client of a call over mutual TLS."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


def make_pki(out: str | Path, roles: tuple[str, ...] = ROLES) -> Path:
    """Write ``ca.pem`` and ``<role>.pem``/``<role>.key`` for each role into ``out`` (mode 0700,
    keys 0600); the CA's private key is discarded."""
    out = Path(out)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"overlaylab run CA {now:%Y%m%dT%H%M%S}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for role in roles:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, role)])).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"overlaylab.{role}")]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                                                     if role == "peer" else [ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        (out / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = out / f"{role}.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    os.chmod(out, 0o700)
    return out
