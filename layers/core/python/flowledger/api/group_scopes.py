"""Which API scopes a console user's Cognito groups give them: the one place the mapping is written.

In AWS the console's user pool signs patients in, and its pre token generation trigger
(``flowledger.api.token_claims``) writes these scopes into the id token's ``scope`` claim, which the
API's authorizer reads as it reads any issuer's. The infrastructure makes one group per entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

OPERATORS_GROUP = "operators"
# Operators who may also erase a subject: the one route the operators' role is denied.
ERASURE_OFFICERS_GROUP = "erasure-officers"
PATIENTS_GROUP = "patients"
CHAT_USERS_GROUP = "chat-users"
# The user attribute an operator sets when inviting a patient; the app client may read it, never write it.
PATIENT_ID_ATTRIBUTE = "custom:patient_id"

GROUP_SCOPES: Mapping[str, tuple[str, ...]] = {
    # Operators sign the /admin/v1 calls with IAM credentials from the identity pool: no bearer scope.
    OPERATORS_GROUP: (),
    ERASURE_OFFICERS_GROUP: (),
    # A patient reads the explanations of their own flows and sets their consent to read them.
    PATIENTS_GROUP: ("reasoning.read",),
    # The chat, and the workspaces and documents a conversation grounds on.
    CHAT_USERS_GROUP: ("chat", "documents"),
}
GROUP_DESCRIPTIONS: Mapping[str, str] = {
    OPERATORS_GROUP: "May call the /admin/v1 routes through the console's identity pool, but erase no subject",
    ERASURE_OFFICERS_GROUP: "The operators' routes and also POST /admin/v1/subjects/{patient_id}/erasure",
    PATIENTS_GROUP: "Bearer scope reasoning.read: their own explanations and consent (needs custom:patient_id)",
    CHAT_USERS_GROUP: "Bearer scopes chat and documents",
}


def scopes_for_groups(groups: Iterable[str]) -> list[str]:
    """The scopes the groups give, sorted and without repeats; a group not in the mapping gives none."""
    return sorted({scope for group in groups for scope in GROUP_SCOPES.get(group, ())})


def id_token_claims(groups: Iterable[str], attributes: Mapping[str, str]) -> dict[str, str]:
    """The claims to add to a console user's id token: ``scope`` (space-separated) and ``patient_id``.

    A claim with nothing to say is left out: no groups with scopes, no ``scope``; no
    ``custom:patient_id`` (or an empty one), no ``patient_id``.
    """
    claims: dict[str, str] = {}
    scopes = scopes_for_groups(groups)
    if scopes:
        claims["scope"] = " ".join(scopes)
    patient_id = attributes.get(PATIENT_ID_ATTRIBUTE, "").strip()
    if patient_id:
        claims["patient_id"] = patient_id
    return claims
