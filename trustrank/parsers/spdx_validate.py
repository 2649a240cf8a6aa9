"""SPDX 2.x validation in linear time, made of spdx-tools' own element validators.

`validate_full_spdx_document` (spdx-tools 0.8) looks every referenced SPDX id up in a list it
rebuilds for each reference, and scans all relationships for each package: quadratic. On a
5,000-package document it takes 17.5 s on one core (DESIGN.md's 5,000-component yardstick;
the parse itself takes 0.5 s). This runs the same per-element validators (creation info,
package, file, snippet, licence expressions, extracted licences, external references) and
does the document-wide checks — ids unique, every referenced id present, something described
— with sets, so the same document validates in well under a second.

One rule of the full validator is left out on purpose: "package must contain no elements if
files_analyzed is False". Generators (and the SPDX project's own examples) commonly break it;
it says nothing about the inventory TrustRank reads, and refusing those SBOMs would refuse
real pipelines' uploads. `tests/parsers/test_spdx.py` checks that apart from it, this finds
what the full validator finds on the committed documents.

**Fatal or tolerated.** Real generators (syft, Trivy, ko, the Kubernetes `bom` tool, GitHub's
dependency graph export) write documents the validator objects to in fields TrustRank does not
read: fractional seconds in `created`, files without checksums, absolute file names, no
`copyrightText`, `https://` as a download location, licence expressions off the SPDX list…
Dependency-Track and GUAC take them; refusing them would refuse those pipelines. So a message
is decided by the field it names, not by an allowlist of message texts:

- *fatal* — what the inventory is built from: every SPDX id unique, and every element a
  relationship names present in the document (or in another one, through an external
  document reference). A broken id or edge would silently lose packages or dependencies.
  What spdx-tools' parser cannot read at all (no package name or SPDXID, wrong types) is
  fatal before this runs (`spdx2`).
- *tolerated* (a warning) — every message of spdx-tools' per-element validators (creation
  info, package, file, snippet, licence expressions, extracted licences, external
  references, actors) and the document-wide rules about describing, annotations and
  snippets. These fields are either not read, or read best-effort (a licence string, a
  hash) where a wrong value misleads no match.

A new validator message therefore lands on the side of the element it is about, with no code
change here.
"""

from __future__ import annotations

from typing import Any

from spdx_tools.spdx.model import Document, RelationshipType, SpdxNoAssertion, SpdxNone
from spdx_tools.spdx.validation.actor_validator import validate_actor
from spdx_tools.spdx.validation.creation_info_validator import validate_creation_info
from spdx_tools.spdx.validation.extracted_licensing_info_validator import (
    validate_extracted_licensing_infos,
)
from spdx_tools.spdx.validation.file_validator import validate_file
from spdx_tools.spdx.validation.license_expression_validator import validate_license_expression
from spdx_tools.spdx.validation.package_validator import validate_package
from spdx_tools.spdx.validation.snippet_validator import validate_snippet
from spdx_tools.spdx.validation.spdx_id_validators import validate_spdx_id
from spdx_tools.spdx.validation.validation_message import (
    SpdxElementType,
    ValidationContext,
    ValidationMessage,
)


def validation_problems(document: Document) -> tuple[list[str], list[str]]:
    """(fatal, tolerated): every problem as "where: what", where naming the SPDX id or the
    kind of element (see the module docstring for which is which)."""
    tolerated, fatal = _messages(document)
    return [_where(m) + m.validation_message for m in fatal], [
        _where(m) + m.validation_message for m in tolerated
    ]


def validation_messages(document: Document) -> list[ValidationMessage]:
    """All messages, fatal and tolerated, as spdx-tools' full validator gives them."""
    tolerated, fatal = _messages(document)
    return tolerated + fatal


def _messages(document: Document) -> tuple[list[ValidationMessage], list[ValidationMessage]]:
    info = document.creation_info
    version = info.spdx_version
    doc_id = info.spdx_id
    out: list[ValidationMessage] = list(validate_creation_info(info, version))
    fatal: list[ValidationMessage] = []
    ids = [doc_id]
    ids += [p.spdx_id for p in document.packages]
    ids += [f.spdx_id for f in document.files]
    ids += [s.spdx_id for s in document.snippets]
    known = set(ids)
    file_ids = {f.spdx_id for f in document.files}

    licences = _LicenceCheck(document)

    def element(spdx_id: str, kind: SpdxElementType, obj: object) -> ValidationContext:
        return ValidationContext(
            spdx_id=spdx_id, parent_id=doc_id, element_type=kind, full_element=obj
        )

    for package in document.packages:
        ctx = element(package.spdx_id, SpdxElementType.PACKAGE, package)
        out += _id_messages(package.spdx_id, document, ctx)
        out += licences.one(package.license_concluded, package.spdx_id)
        if package.license_info_from_files and not package.files_analyzed:
            out.append(ValidationMessage(
                "license_info_from_files must be None if files_analyzed is False, but is: "
                f"{package.license_info_from_files}", ctx))
        elif package.license_info_from_files:
            out += licences.many(package.license_info_from_files, package.spdx_id)
        out += licences.one(package.license_declared, package.spdx_id)
        out += validate_package(package, version, ctx)
    for file in document.files:
        ctx = element(file.spdx_id, SpdxElementType.FILE, file)
        out += _id_messages(file.spdx_id, document, ctx)
        out += licences.one(file.license_concluded, file.spdx_id)
        out += licences.many(file.license_info_in_file, file.spdx_id)
        out += validate_file(file, version, ctx)
    for snippet in document.snippets:
        ctx = element(snippet.spdx_id, SpdxElementType.SNIPPET, snippet)
        out += _id_messages(snippet.spdx_id, document, ctx)
        out += _id_messages(snippet.file_spdx_id, document, ctx)
        if snippet.file_spdx_id not in file_ids:
            out.append(ValidationMessage(
                f'did not find the referenced spdx_id "{snippet.file_spdx_id}" in the SPDX '
                "document's files", ctx))
        out += licences.one(snippet.license_concluded, snippet.spdx_id)
        out += licences.many(snippet.license_info_in_snippet, snippet.spdx_id)
        out += validate_snippet(snippet, version, ctx)
    for annotation in document.annotations:
        ctx = ValidationContext(element_type=SpdxElementType.ANNOTATION, full_element=annotation)
        out += validate_actor(annotation.annotator, "annotation")
        form, missing = _reference_messages(annotation.spdx_id, document, known, ctx)
        out += form + missing
    for rel in document.relationships:
        ctx = ValidationContext(element_type=SpdxElementType.RELATIONSHIP, full_element=rel)
        ends = [rel.spdx_element_id]
        if not isinstance(rel.related_spdx_element_id, SpdxNone | SpdxNoAssertion):
            ends.append(rel.related_spdx_element_id)
        for end in ends:
            form, missing = _reference_messages(end, document, known, ctx)
            out += form
            fatal += missing
        if version == "SPDX-2.2" and rel.relationship_type in (
            RelationshipType.SPECIFICATION_FOR,
            RelationshipType.REQUIREMENT_DESCRIPTION_FOR,
        ):
            out.append(ValidationMessage(
                f"{rel.relationship_type} is not supported in SPDX-2.2", ctx))
    out += validate_extracted_licensing_infos(document.extracted_licensing_info)
    doc_ctx = ValidationContext(spdx_id=doc_id, element_type=SpdxElementType.DOCUMENT)
    describes = any(
        (r.relationship_type == RelationshipType.DESCRIBES and r.spdx_element_id == doc_id)
        or (
            r.relationship_type == RelationshipType.DESCRIBED_BY
            and r.related_spdx_element_id == doc_id
        )
        for r in document.relationships
    )
    single = len(document.packages) == 1 and not document.files and not document.snippets
    if not single and not describes:
        out.append(ValidationMessage(
            f'there must be at least one relationship "{doc_id} DESCRIBES ..." or "... '
            f'DESCRIBED_BY {doc_id}" when there is not only a single package present', doc_ctx))
    seen: set[str] = set()
    duplicates = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    if duplicates:
        fatal.append(ValidationMessage(
            "every spdx_id must be unique within the document, but found the following "
            f"duplicates: {duplicates}", doc_ctx))
    return out, fatal


class _LicenceCheck:
    """spdx-tools' licence expression check, once per distinct expression in the document:
    parsing expressions is most of the validation time, and thousands of packages share a
    handful of licences (the answer depends only on the expression and the document)."""

    def __init__(self, document: Document) -> None:
        self.document = document
        self.seen: dict[str, list[str]] = {}

    def one(self, expression: Any, parent_id: str) -> list[ValidationMessage]:
        if expression is None or isinstance(expression, SpdxNone | SpdxNoAssertion):
            return []
        key = str(expression)
        texts = self.seen.get(key)
        if texts is None:
            texts = [
                m.validation_message
                for m in validate_license_expression(expression, self.document, parent_id)
            ]
            self.seen[key] = texts
        ctx = ValidationContext(
            parent_id=parent_id,
            element_type=SpdxElementType.LICENSE_EXPRESSION,
            full_element=expression,
        )
        return [ValidationMessage(t, ctx) for t in texts]

    def many(self, expressions: list[Any], parent_id: str) -> list[ValidationMessage]:
        return [m for e in expressions for m in self.one(e, parent_id)]


def _id_messages(
    spdx_id: str, document: Document, ctx: ValidationContext
) -> list[ValidationMessage]:
    return [ValidationMessage(m, ctx) for m in validate_spdx_id(spdx_id, document)]


def _reference_messages(
    spdx_id: str, document: Document, known: set[str], ctx: ValidationContext
) -> tuple[list[ValidationMessage], list[ValidationMessage]]:
    """The id's form (and its external document, if it names one); its absence."""
    missing = []
    if ":" not in spdx_id and spdx_id not in known:
        missing.append(ValidationMessage(
            f'did not find the referenced spdx_id "{spdx_id}" in the SPDX document', ctx))
    return _id_messages(spdx_id, document, ctx), missing


def _where(message: ValidationMessage) -> str:
    ctx = message.context
    kind = ctx.element_type.name.lower().replace("_", " ") if ctx.element_type else ""
    if ctx.spdx_id:
        return f"{ctx.spdx_id} ({kind}): " if kind else f"{ctx.spdx_id}: "
    if ctx.parent_id and kind:
        return f"{ctx.parent_id} ({kind}): "
    if kind == "relationship" and ctx.full_element is not None:
        rel = ctx.full_element
        return (
            f"relationship {rel.spdx_element_id} {rel.relationship_type.name} "
            f"{rel.related_spdx_element_id}: "
        )
    return f"{kind}: " if kind else ""
