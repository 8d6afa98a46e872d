"""Mutual TLS credentials from PEM files, as the CLI's --tls-* flags."""
import dataclasses
import os
from typing import Any, List, Optional, Tuple, Union

import grpc

Path = Union[str, "os.PathLike[str]"]


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
    def from_files(cls, ca: Path, cert: Path, key: Path,
                   identity: Optional[str] = None) -> "Credentials":
        """Reads the three PEM files (OSError if one cannot be read)."""
        def read(path: Path) -> bytes:
            with open(path, "rb") as f:
                return f.read()
        return cls(read(ca), read(cert), read(key), identity)

    def channel_credentials(self) -> Any:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key,
            certificate_chain=self.cert)

    def channel_options(self) -> List[Tuple[str, Any]]:
        if not self.identity:
            return []
        return [("grpc.ssl_target_name_override", self.identity)]
