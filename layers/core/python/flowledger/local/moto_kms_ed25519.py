"""Ed25519 keys for moto's KMS, as AWS KMS has them: key spec ``ECC_NIST_EDWARDS25519``, algorithm ``ED25519_SHA_512``.

The ledger's checkpoints are signed notes (C2SP ``signed-note``), whose standard signature is Ed25519;
AWS KMS signs with Ed25519 keys (``SIGN_VERIFY`` usage, pure EdDSA over a ``RAW`` message), moto 5 does
not know the key spec. This teaches it: such a key is created, described, signed with, verified with and
exported (``GetPublicKey``, DER SubjectPublicKeyInfo) as KMS does; a ``DIGEST`` message is refused, as
KMS refuses it for ``ED25519_SHA_512``. Installed by the locked server, like the other moto patches; the
key's private half pickles with the store as any other (``moto_state``).
"""

from __future__ import annotations

import functools
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from moto.kms import models as kms_models
from moto.kms import responses as kms_responses
from moto.kms.exceptions import ValidationException
from moto.kms.utils import AbstractPrivateKey, KeySpec

EDWARDS25519 = "ECC_NIST_EDWARDS25519"
ED25519_SHA_512 = "ED25519_SHA_512"
_INSTALLED = False


class Ed25519Key(AbstractPrivateKey):
    """An Ed25519 private key that signs the message itself (pure EdDSA: SHA-512 is inside the algorithm)."""

    def __init__(self) -> None:
        self.private_key = ed25519.Ed25519PrivateKey.generate()

    def sign(self, message: bytes, signing_algorithm: str) -> bytes:
        _check_algorithm(signing_algorithm)
        return self.private_key.sign(message)

    def verify(self, message: bytes, signature: bytes, signing_algorithm: str) -> bool:
        _check_algorithm(signing_algorithm)
        try:
            self.private_key.public_key().verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            encoding=serialization.Encoding.DER, format=serialization.PublicFormat.SubjectPublicKeyInfo
        )


def _check_algorithm(signing_algorithm: str) -> None:
    if signing_algorithm != ED25519_SHA_512:
        raise ValidationException(
            f"1 validation error detected: Value '{signing_algorithm}' at 'SigningAlgorithm' failed to satisfy "
            f"constraint: Member must satisfy enum value set: ['{ED25519_SHA_512}']"
        )


def install() -> None:
    """Teach moto's KMS the Ed25519 key spec (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    original_specs = KeySpec.key_specs.__func__  # type: ignore[attr-defined]
    original_generate = kms_models.generate_private_key  # type: ignore[attr-defined]
    original_algorithms = kms_models.Key.signing_algorithms.fget  # type: ignore[attr-defined]
    original_sign, original_verify = kms_responses.KmsResponse.sign, kms_responses.KmsResponse.verify

    def key_specs(cls: type[KeySpec]) -> list[str]:
        return sorted({*original_specs(cls), EDWARDS25519})

    def generate_private_key(key_spec: str) -> AbstractPrivateKey:
        return Ed25519Key() if key_spec == EDWARDS25519 else original_generate(key_spec)

    def signing_algorithms(self: kms_models.Key) -> list[str]:
        if self.key_spec == EDWARDS25519 and self.key_usage == "SIGN_VERIFY":
            return [ED25519_SHA_512]
        return original_algorithms(self)  # type: ignore[no-any-return]

    def raw_only(original: Any) -> Any:
        @functools.wraps(original)
        def answer(self: kms_responses.KmsResponse) -> str:
            # KMS signs an Ed25519 message whole: a digest is refused, not signed as if it were the message.
            digest = self._get_param("MessageType") == "DIGEST"
            if digest and self._get_param("SigningAlgorithm") == ED25519_SHA_512:
                raise ValidationException(f"{ED25519_SHA_512} signs RAW messages only; use ED25519_PH_SHA_512")
            return str(original(self))

        return answer

    KeySpec.key_specs = classmethod(key_specs)  # type: ignore[method-assign,assignment]
    kms_models.generate_private_key = generate_private_key  # type: ignore[attr-defined]
    kms_models.Key.signing_algorithms = property(signing_algorithms)  # type: ignore[method-assign,assignment]
    kms_responses.KmsResponse.sign = raw_only(original_sign)  # type: ignore[method-assign]
    kms_responses.KmsResponse.verify = raw_only(original_verify)  # type: ignore[method-assign]
    _INSTALLED = True
