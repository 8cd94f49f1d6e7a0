"""The dev server's data directory: signing key, admin credentials and the local endpoints.

``signing-key.pem``        RSA key of the local token issuer (``flowledger token`` signs with it)
``admin-credentials.json`` access key id, secret and region for SigV4-signed admin calls
``local.json``             base URL, embedded AWS endpoint, region, physical table and bucket names
``aws-state.pickle``       the embedded store (tables, buckets, keys, log groups), saved at intervals and on shutdown
``journal/``               every write since that snapshot, made durable before it is answered (local/journal.py)
``demo-incident.sqlite``   the demo incident's database, which the diagnosis agent's ``query_sql`` reads
``metrics.jsonl``          the server's metrics, one EMF record a line (``GET /metrics`` sums them up)
``serve.lock``             locked by the server using the directory: its pid and URL (local/datadir_lock.py)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from flowledger.errors import ConfigurationError

# moto accepts any credentials; fixed ones keep the embedded store independent of ~/.aws (the dev server
# and every `--data-dir` command use them; here so that such a command does not load the server).
EMBEDDED_CREDENTIALS = ("flowledger-local", "flowledger-local-secret")

DEFAULT_DATA_DIR = ".flowledger"  # where the CLI looks when no --data-dir is given
LOCAL_ACCOUNT = "000000000000"
LOCAL_AUDIENCE = "flowledger"
LOCAL_ISSUER = "flowledger-local"
DEV_USER = "dev-user"  # the local developer: the printed token's subject, and the console chat page's user
STATE_FILE = "aws-state.pickle"  # the embedded store's snapshot (local/moto_state.py)
JOURNAL_DIR = "journal"  # the writes since the snapshot (local/journal.py)
DEMO_DATABASE_FILE = "demo-incident.sqlite"  # built with the demo logs on a fresh store
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class AdminCredentials:
    access_key_id: str
    secret_access_key: str
    region: str
    principal_arn: str


@dataclass(frozen=True)
class LocalEndpoints:
    base_url: str
    aws_endpoint_url: str
    region: str
    resource_prefix: str
    bucket_suffix: str
    tables: dict[str, str]
    buckets: dict[str, str]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


class DataDir:
    """Reads and (on first use) creates the files of one local data directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def _key_file(self) -> Path:
        return self.path / "signing-key.pem"

    @property
    def _credentials_file(self) -> Path:
        return self.path / "admin-credentials.json"

    @property
    def _local_file(self) -> Path:
        return self.path / "local.json"

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @property
    def journal_dir(self) -> Path:
        return self.path / JOURNAL_DIR

    @property
    def demo_database(self) -> Path:
        return self.path / DEMO_DATABASE_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    def ensure(self, region: str) -> None:
        """Create the directory, signing key and admin credentials if they are missing."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self._key_file.exists():
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write_private(
                self._key_file,
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
            )
        if not self._credentials_file.exists():
            credentials = AdminCredentials(
                access_key_id="AKIAFL" + secrets.token_hex(7).upper(),
                secret_access_key=secrets.token_urlsafe(30),
                region=region,
                principal_arn=f"arn:aws:iam::{LOCAL_ACCOUNT}:user/flowledger-local-admin",
            )
            _write_private(self._credentials_file, json.dumps(asdict(credentials), indent=2).encode())

    def reset(self) -> None:
        """Forget everything: the store's saved state, the signing key (old tokens stop working),
        the admin credentials, the endpoints and the demo database. ``ensure`` makes new ones."""
        for path in (self.state_file, self.demo_database, self._key_file, self._credentials_file, self._local_file):
            path.unlink(missing_ok=True)
        for leftover in self.path.glob(f".{STATE_FILE}.*.tmp"):  # a snapshot a crash interrupted
            leftover.unlink(missing_ok=True)
        for segment in self.journal_dir.glob("segment-*.log"):
            segment.unlink()
        for suffix in ("-journal", "-wal", "-shm"):  # SQLite's side files, if a build was interrupted
            self.path.joinpath(DEMO_DATABASE_FILE + suffix).unlink(missing_ok=True)

    def private_key_pem(self) -> bytes:
        if not self._key_file.exists():
            raise ConfigurationError(f"no signing key in {self.path}; start `flowledger serve` first")
        return self._key_file.read_bytes()

    def token(self, sub: str, scopes: list[str], *, patient_id: str | None = None, ttl_seconds: int = 3600) -> str:
        """A bearer token from this data dir's local issuer (what the dev server's verifier accepts)."""
        from flowledger.api.tokens import mint_token  # jwt signing: only for the commands that mint

        return mint_token(
            private_key_pem=self._private_key(),
            kid=self.key_id(),
            issuer=LOCAL_ISSUER,
            audience=LOCAL_AUDIENCE,
            sub=sub,
            scopes=scopes,
            patient_id=patient_id,
            ttl_seconds=ttl_seconds,
        )

    def key_id(self) -> str:
        """A stable key id: the SHA-256 of the public key, base64url, shortened."""
        digest = hashlib.sha256(self._public_der()).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")[:16]

    def _private_key(self) -> rsa.RSAPrivateKey:
        # The directory's own key, made by ensure(): its consistency check (30-50 ms a load, twice for
        # every token `flowledger chat` mints) would only re-prove what ensure() generated.
        key = serialization.load_pem_private_key(
            self.private_key_pem(), password=None, unsafe_skip_rsa_key_validation=True
        )
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ConfigurationError(f"{self._key_file} is not an RSA key")
        return key

    def _public_der(self) -> bytes:
        key = self._private_key()
        return key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def jwks(self) -> dict[str, Any]:
        """The public JWKS of the local issuer."""
        jwk = json.loads(RSAAlgorithm.to_jwk(self._private_key().public_key()))
        jwk.update(kid=self.key_id(), use="sig", alg="RS256")
        return {"keys": [jwk]}

    def admin_credentials(self) -> AdminCredentials:
        if not self._credentials_file.exists():
            raise ConfigurationError(f"no admin credentials in {self.path}; start `flowledger serve` first")
        return AdminCredentials(**json.loads(self._credentials_file.read_text()))

    def write_endpoints(self, endpoints: LocalEndpoints) -> None:
        self._local_file.write_text(json.dumps(asdict(endpoints), indent=2) + "\n")

    def endpoints(self) -> LocalEndpoints:
        if not self._local_file.exists():
            raise ConfigurationError(f"no local.json in {self.path}; is `flowledger serve` running?")
        return LocalEndpoints(**json.loads(self._local_file.read_text()))
