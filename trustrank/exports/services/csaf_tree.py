"""The CSAF 2.0 product tree of an export, and the mandatory tests (CSAF 2.0 section 6.1)
that its product ids must pass while the document is written a vulnerability at a time.

Tree: `branches` vendor → product_name → product_version for every project version the
export speaks of (vendor: the publisher; leaf id `TRP-PV-<id>`, with the purl and cpe its
SBOM's metadata.component gave) and for every affected component (vendor: the purl's
namespace, else its type; leaf id `TRP-C-<hash>`, with its purl and cpe); a
`relationships` entry `default_component_of` joins each affected component to the project
version that ships it, and its `full_product_name` (`TRP-<hash>`) is the product that
vulnerabilities' `product_status` name. A finding with no project version names the
component itself. A version-less product is a leaf of its product_name branch.

Identification helpers that fail the schema's purl or CPE pattern are left out (and said so
in a note) rather than failing the whole export for one SBOM's odd CPE.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from trustrank.exports.services.vex_cyclonedx import InvalidDocument

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "csaf_json_schema.json"


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The schema's own purl and CPE patterns, so a helper kept is one the schema accepts."""
    schema = orjson.loads(SCHEMA.read_bytes())
    helper = schema["$defs"]["full_product_name_t"]["properties"][
        "product_identification_helper"
    ]["properties"]
    return re.compile(helper["purl"]["pattern"]), re.compile(helper["cpe"]["pattern"])


def _helper(purl: str, cpe: str, dropped: list[str]) -> dict[str, str]:
    purl_ok, cpe_ok = _patterns()
    out = {}
    if purl:
        if purl_ok.search(purl):
            out["purl"] = purl
        else:
            dropped.append(f"purl {purl!r}")
    if cpe:
        if cpe_ok.search(cpe):
            out["cpe"] = cpe
        else:
            dropped.append(f"cpe {cpe!r}")
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def component_key(purl: str, name: str, version: str) -> str:
    return purl or f"{name}@{version}".strip("@") or "component"


def pair_id(pv_id: int | None, key: str) -> str:
    """The product a vulnerability's product_status names for one finding."""
    if pv_id is None:
        return "TRP-C-" + _digest(key)
    return "TRP-" + _digest(f"{pv_id}|{key}")


def row_product_id(row: dict[str, Any]) -> str:
    key = component_key(row["component_purl"], row["_component_name"], row["_component_version"])
    return pair_id(row["_project_version_id"], key)


def _vendor_of(purl: str) -> str:
    if purl.startswith("pkg:") and "/" in purl:
        kind, _, rest = purl[4:].partition("/")
        path = rest.split("@", 1)[0].split("?", 1)[0].split("#", 1)[0]
        if "/" in path:
            return path.rsplit("/", 1)[0]
        return kind
    return "unknown vendor"


@dataclass
class CsafProducts:
    tree: dict[str, Any]
    defined: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


class _Branches:
    """vendor → product_name → product_version, kept sorted for a stable document."""

    def __init__(self) -> None:
        self.vendors: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}

    def add(self, vendor: str, name: str, version: str, product: dict[str, Any]) -> None:
        versions = self.vendors.setdefault(vendor, {}).setdefault(name, {})
        versions.setdefault(version, product)

    def as_list(self) -> list[dict[str, Any]]:
        out = []
        for vendor, names in sorted(self.vendors.items()):
            name_branches = []
            for name, versions in sorted(names.items()):
                branch: dict[str, Any] = {"category": "product_name", "name": name}
                if "" in versions:
                    branch["product"] = versions[""]
                leaves = [
                    {"category": "product_version", "name": v, "product": p}
                    for v, p in sorted(versions.items()) if v
                ]
                if leaves:
                    if "product" in branch:
                        # A branch is a product or has branches: both, and the version-less
                        # one gets a branch of its own.
                        name_branches.append(branch)
                        branch = {"category": "product_name", "name": name}
                    branch["branches"] = leaves
                name_branches.append(branch)
            out.append({"category": "vendor", "name": vendor, "branches": name_branches})
        return out


def csaf_product_tree(
    versions: list[dict[str, Any]], pairs: list[dict[str, Any]], *, vendor: str
) -> CsafProducts:
    """The tree of product.csaf_products_of's project versions and (version, component)
    pairs; raises InvalidDocument if a product id would be defined twice (6.1.2)."""
    branches = _Branches()
    dropped: list[str] = []
    defined: list[str] = []
    relationships: list[dict[str, Any]] = []
    pv_names: dict[int, str] = {}
    for pv in versions:
        pid = f"TRP-PV-{pv['project_version_id']}"
        full = f"{pv['name']} {pv['version']}".strip()
        pv_names[pv["project_version_id"]] = full
        product: dict[str, Any] = {"name": full, "product_id": pid}
        helper = _helper(pv.get("purl", ""), pv.get("cpe", ""), dropped)
        if helper:
            product["product_identification_helper"] = helper
        branches.add(vendor, pv["name"], pv["version"] or "", product)
        defined.append(pid)
    components: set[str] = set()
    related: set[str] = set()
    for pair in pairs:
        purl, name, version = (
            pair["component_purl"], pair["component_name"], pair["component_version"]
        )
        key = component_key(purl, name, version)
        cid = pair_id(None, key)
        if cid not in components:
            components.add(cid)
            product = {"name": key, "product_id": cid}
            helper = _helper(purl, pair.get("component__cpe") or "", dropped)
            if helper:
                product["product_identification_helper"] = helper
            branches.add(_vendor_of(purl), name or key, version or "", product)
            defined.append(cid)
        pv_id = pair["project_version_id"]
        if pv_id is None or pv_id not in pv_names:
            continue
        rid = pair_id(pv_id, key)
        if rid in related:
            continue
        related.add(rid)
        relationships.append(
            {
                "category": "default_component_of",
                "full_product_name": {"name": f"{key} in {pv_names[pv_id]}", "product_id": rid},
                "product_reference": cid,
                "relates_to_product_reference": f"TRP-PV-{pv_id}",
            }
        )
        defined.append(rid)
    if len(set(defined)) != len(defined):
        twice = sorted({d for d in defined if defined.count(d) > 1})
        raise InvalidDocument(f"CSAF 6.1.2: product ids defined twice: {twice[:5]}")
    tree: dict[str, Any] = {}
    if branches.vendors:
        tree["branches"] = branches.as_list()
    if relationships:
        tree["relationships"] = relationships
    if not tree:
        # The profile wants a product tree and the schema a non-empty one: an export with
        # no finding names no product, and says so.
        tree["full_product_names"] = [{"name": "no products", "product_id": "TRP-none"}]
    notes = []
    if dropped:
        notes.append(
            "identification helpers left out because the CSAF 2.0 schema refuses them: "
            + ", ".join(dropped[:20]) + (" …" if len(dropped) > 20 else "")
        )
    return CsafProducts(tree=tree, defined=set(defined), notes=notes)


def referenced_ids(vulnerability: dict[str, Any]) -> set[str]:
    """Every product id a vulnerability names (status, flags, threats, remediations)."""
    ids: set[str] = set()
    for group in vulnerability.get("product_status", {}).values():
        ids.update(group)
    for key in ("flags", "threats", "remediations", "scores"):
        for item in vulnerability.get(key, []):
            ids.update(item.get("product_ids", []) or item.get("products", []))
    return ids


def vulnerability_check(vulnerability: dict[str, Any], defined: set[str]) -> None:
    """The mandatory tests a vulnerability can fail on its own: 6.1.1 (a product id it names
    is defined in the product tree) and 6.1.6 (no product in two contradicting statuses)."""
    missing = referenced_ids(vulnerability) - defined
    if missing:
        raise InvalidDocument(f"CSAF 6.1.1: product ids not defined: {sorted(missing)[:5]}")
    status = vulnerability.get("product_status", {})
    seen: dict[str, str] = {}
    for group, ids in status.items():
        for pid in ids:
            if pid in seen and seen[pid] != group:
                raise InvalidDocument(
                    f"CSAF 6.1.6: product {pid} is both {seen[pid]} and {group}"
                )
            seen[pid] = group
