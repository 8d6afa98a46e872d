"""Mutual TLS credentials from PEM files, as the CLI's --tls-* flags."""
import dataclasses
from typing import Optional

import grpc


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The CA that signs workers, this client's certificate chain and key
    (PEM bytes), and the identity (a SAN) expected on the worker's
    certificate; None: the host dialled."""

    ca: bytes
    cert: bytes
    key: bytes
    identity: Optional[str] = None

    @classmethod
    def from_files(cls, ca, cert, key, identity=None):
        """Reads the three PEM files (OSError if one cannot be read)."""
        def read(path):
            with open(path, "rb") as f:
                return f.read()
        return cls(read(ca), read(cert), read(key), identity)

    def channel_credentials(self):
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key,
            certificate_chain=self.cert)

    def channel_options(self):
        if not self.identity:
            return []
        return [("grpc.ssl_target_name_override", self.identity)]
