"""Known quirks of real SPDX 2.x generators, put right before spdx-tools reads the document.

spdx-tools' parser refuses some departures from the specification outright (a parse error, not
a validation message), although they say nothing about the inventory. Each is rewritten here
to what the specification asks, and the rewrite is reported as a warning:

- `creationInfo.created` with fractional seconds (syft, Trivy: `…:55.556104Z`, nanoseconds)
  or an offset instead of `Z`: read as the same instant in whole seconds, UTC.
- a file without `checksums` (syft before 0.68, Trivy): spdx-tools cannot hold a file without
  one, so it gets a placeholder SHA1 of zeros. Files are not inventory: TrustRank never reads
  or stores a file's checksum, and the warning says the file had none.
- a package without `downloadLocation` (Trivy before 0.38): NOASSERTION.

Anything else spdx-tools cannot read stays a parse error (fatal).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

_SPDX_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# Python reads at most microseconds; nanoseconds (Go's time.RFC3339Nano) are cut to them.
_FRACTION = re.compile(r"(\.\d{1,6})\d*")
_PLACEHOLDER_SHA1 = {"algorithm": "SHA1", "checksumValue": "0" * 40}


def quirks_normalise(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The document with the known quirks put right (a shallow copy where changed; the input
    is left alone) and one warning per kind of change."""
    warnings: list[str] = []
    info = doc.get("creationInfo")
    if isinstance(info, dict):
        created = info.get("created")
        fixed = _created(created)
        if fixed is not None:
            doc = {**doc, "creationInfo": {**info, "created": fixed}}
            warnings.append(
                f"creationInfo.created {created!r} is not in the form YYYY-MM-DDThh:mm:ssZ; "
                f"read as {fixed}"
            )
    files = doc.get("files")
    if isinstance(files, list):
        missing = [i for i, f in enumerate(files) if isinstance(f, dict) and "checksums" not in f]
        if missing:
            files = list(files)
            for i in missing:
                files[i] = {**files[i], "checksums": [_PLACEHOLDER_SHA1]}
            doc = {**doc, "files": files}
            warnings.append(_counted(missing, files, "file", "no checksums"))
    packages = doc.get("packages")
    if isinstance(packages, list):
        missing = [
            i for i, p in enumerate(packages) if isinstance(p, dict) and "downloadLocation" not in p
        ]
        if missing:
            packages = list(packages)
            for i in missing:
                packages[i] = {**packages[i], "downloadLocation": "NOASSERTION"}
            doc = {**doc, "packages": packages}
            warnings.append(
                _counted(missing, packages, "package", "no downloadLocation (read as NOASSERTION)")
            )
    return doc, warnings


def _created(value: Any) -> str | None:
    """The time in SPDX's own form when it is a readable ISO 8601 time in another form."""
    if not isinstance(value, str) or _SPDX_TIME.match(value):
        return None
    try:
        moment = datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip(), count=1))
    except ValueError:
        return None  # spdx-tools says what is wrong with it
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _counted(indexes: list[int], items: list[Any], kind: str, what: str) -> str:
    first = items[indexes[0]].get("SPDXID", f"#{indexes[0]}")
    if len(indexes) == 1:
        return f"{first} ({kind}): has {what}"
    return f"{len(indexes)} {kind}s have {what} (the first: {first})"
