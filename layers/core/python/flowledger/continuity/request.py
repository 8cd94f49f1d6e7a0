"""The chat request's source fields: what to ground a turn on and what to do with it.

Seed, "Selection UI/backend consistency": *send selection_mode explicitly; panel visibility must not
change source semantics*. Seed, "All Documents semantics": *Compare: explicit Source and Targets only;
reject ambiguous all requests for Compare rather than guessing*.

Unknown fields are refused (a misspelt ``selection_mod`` must never quietly become a relevance search),
except the few UI-only fields named in ``UI_ONLY_FIELDS``: a client may send its panel state, and it is
dropped before validation, so it can change nothing. An allow-list rather than ``extra="ignore"``: ignoring
everything would also swallow the misspellings of the fields that do matter.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, model_validator

from flowledger.workspaces.models import DOCUMENT_PATTERN

SelectionMode = Literal["selected", "all", "history", "relevance"]
ActionMode = Literal["chat", "search", "analyze", "compare"]

MAX_SOURCES_PER_TURN = 100
"""Issue #14: at most 100 sources per turn (a selection, a compare's source and targets, grounded refs)."""
MAX_SELECTED_DOCUMENTS = MAX_SOURCES_PER_TURN
# The source is a source too: with 99 targets a compare stays within the per-turn bound.
MAX_COMPARE_TARGETS = MAX_SOURCES_PER_TURN - 1
# Sent by clients that show a source panel; what the panel shows is already said by selection_mode.
UI_ONLY_FIELDS = frozenset({"panel_open", "selection_panel_open", "sources_panel_open"})

DocumentId = Annotated[str, StringConstraints(strict=True, pattern=DOCUMENT_PATTERN)]


_EMPTY: dict[str, Any] = {"maxItems": 0}
_SOME: dict[str, Any] = {"minItems": 1}
_COMPARE: dict[str, Any] = {"const": "compare"}
_NOT_COMPARE: dict[str, Any] = {"not": _COMPARE}
_SELECTED: dict[str, Any] = {"const": "selected"}
_NULL: dict[str, Any] = {"type": "null"}  # absent or null: a property schema applies only to a property sent


def _when(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {"required": required, "properties": properties}


# ``_consistent`` below as JSON Schema, written as ``not`` what it refuses, so the OpenAPI document
# states it (issue #31). That a compare's source is not one of its targets compares two values, which
# JSON Schema cannot: the operation's description says so.
_INCONSISTENT: dict[str, Any] = {
    "anyOf": [
        _when(["action_mode"], action_mode=_COMPARE, source=_NULL),
        _when(["action_mode"], action_mode=_COMPARE, targets=_EMPTY),
        _when(["action_mode", "selection_mode"], action_mode=_COMPARE, selection_mode={"not": _SELECTED}),
        _when(["action_mode", "document_ids"], action_mode=_COMPARE, document_ids=_SOME),
        _when(["action_mode", "include_prior"], action_mode=_COMPARE, include_prior={"const": True}),
        _when(["source"], action_mode=_NOT_COMPARE, source={"not": _NULL}),
        _when(["targets"], action_mode=_NOT_COMPARE, targets=_SOME),
        _when(["selection_mode"], action_mode=_NOT_COMPARE, selection_mode=_SELECTED, document_ids=_EMPTY),
        _when(["document_ids"], selection_mode={"not": _SELECTED}, document_ids=_SOME),
        _when(["include_prior"], selection_mode={"not": _SELECTED}, include_prior={"const": True}),
    ]
}


class SourceRequest(BaseModel):
    """The source fields of a chat request (to be inherited by ``ChatRequest``).

    - ``selection_mode``: ``selected`` (exactly ``document_ids``), ``all`` (every readable document),
      ``history`` (the previous turn's grounded sources only), ``relevance`` (default: the previous
      turn's grounded sources first, then a search of the readable scopes);
    - ``action_mode``: ``chat``, ``search``, ``analyze`` or ``compare`` (``source`` against ``targets``);
    - ``include_prior``: with ``selected``, also reuse the previous turn's sources (never implied).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"not": _INCONSISTENT})

    selection_mode: SelectionMode = "relevance"
    document_ids: list[DocumentId] = Field(
        default_factory=list, max_length=MAX_SELECTED_DOCUMENTS, json_schema_extra={"uniqueItems": True}
    )
    action_mode: ActionMode = "chat"
    source: DocumentId | None = Field(None, description="compare only: the document compared")
    targets: list[DocumentId] = Field(
        default_factory=list,
        max_length=MAX_COMPARE_TARGETS,
        description="compare only: what it is compared with",
        json_schema_extra={"uniqueItems": True},
    )
    include_prior: StrictBool = Field(False, description="selected only: merge the previous turn's sources in")

    @model_validator(mode="before")
    @classmethod
    def _drop_ui_only_fields(cls, data: Any) -> Any:
        # Dropped before validation: a panel's state can never reach the fields that decide the sources.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if key not in UI_ONLY_FIELDS}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SourceRequest:
        if self.action_mode == "compare":
            self._check_compare()
        elif self.source is not None or self.targets:
            raise ValueError("source and targets are for action_mode compare only")
        if self.selection_mode == "selected" and self.action_mode != "compare" and not self.document_ids:
            raise ValueError("selection_mode selected needs document_ids")
        if self.selection_mode != "selected" and self.document_ids:
            raise ValueError("document_ids are sent only with selection_mode selected")
        if len(set(self.document_ids)) != len(self.document_ids):
            raise ValueError("document_ids lists a document twice")
        if self.include_prior and self.selection_mode != "selected":
            raise ValueError("include_prior merges the previous sources into an explicit selection: use selected")
        return self

    def _check_compare(self) -> None:
        # Seed: "Compare: explicit Source and Targets only" and "reject ambiguous all requests".
        if self.source is None or not self.targets:
            raise ValueError("compare needs an explicit source and at least one target")
        if "selection_mode" in self.model_fields_set and self.selection_mode != "selected":
            raise ValueError("compare takes only its source and targets, not selection_mode " + self.selection_mode)
        if self.document_ids or self.include_prior:
            raise ValueError("compare takes only its source and targets, not document_ids or include_prior")
        if self.source in self.targets:
            raise ValueError("the compare source cannot also be one of its targets")
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("targets lists a document twice")

    @property
    def selected_ids(self) -> tuple[str, ...]:
        """The explicitly selected documents: ``document_ids``, or a compare's source then its targets."""
        if self.action_mode == "compare" and self.source is not None:
            return (self.source, *self.targets)
        return tuple(self.document_ids) if self.selection_mode == "selected" else ()
