"""CISA Known Exploited Vulnerabilities catalog JSON -> frozen entries. No database access."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

import orjson

CVE_RE = re.compile(r"^CVE-\d{4}-\d{4,}$")


class KevError(ValueError):
    pass


@dataclass(frozen=True)
class KevEntry:
    cve_id: str
    vendor_project: str
    product: str
    vulnerability_name: str
    date_added: date
    short_description: str
    required_action: str
    due_date: date | None
    known_ransomware_campaign_use: str
    notes: str
    cwes: tuple[str, ...]


@dataclass(frozen=True)
class KevCatalog:
    catalog_version: str
    date_released: str
    entries: tuple[KevEntry, ...]


def _date(value: object, where: str, *, required: bool) -> date | None:
    if not value:
        if required:
            raise KevError(f"{where}: missing date")
        return None
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError as exc:
        raise KevError(f"{where}: {value!r} is not a date (YYYY-MM-DD)") from exc


def parse_kev(data: bytes) -> KevCatalog:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise KevError(f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("vulnerabilities"), list):
        raise KevError("not a KEV catalog: expected an object with a 'vulnerabilities' list")
    entries = []
    for i, v in enumerate(doc["vulnerabilities"]):
        where = f"vulnerabilities[{i}]"
        if not isinstance(v, dict):
            raise KevError(f"{where}: must be an object")
        cve = str(v.get("cveID") or "").strip()
        if not CVE_RE.match(cve):
            raise KevError(f"{where}.cveID: {cve!r} is not a CVE id")
        entries.append(
            KevEntry(
                cve_id=cve,
                vendor_project=str(v.get("vendorProject") or ""),
                product=str(v.get("product") or ""),
                vulnerability_name=str(v.get("vulnerabilityName") or ""),
                date_added=_date(v.get("dateAdded"), f"{where}.dateAdded ({cve})", required=True),  # type: ignore[arg-type]
                short_description=str(v.get("shortDescription") or ""),
                required_action=str(v.get("requiredAction") or ""),
                due_date=_date(v.get("dueDate"), f"{where}.dueDate ({cve})", required=False),
                known_ransomware_campaign_use=str(v.get("knownRansomwareCampaignUse") or ""),
                notes=str(v.get("notes") or ""),
                cwes=tuple(str(c) for c in v.get("cwes") or []),
            )
        )
    return KevCatalog(
        catalog_version=str(doc.get("catalogVersion") or ""),
        date_released=str(doc.get("dateReleased") or ""),
        entries=tuple(entries),
    )
