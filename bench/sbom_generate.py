"""Synthetic CycloneDX 1.5 JSON SBOMs of any size, shaped like real Maven/npm/PyPI ones."""

from __future__ import annotations

import hashlib
import uuid

import orjson

_ECOSYSTEMS = ("maven", "npm", "pypi", "golang")


def make_bom(components: int, *, seed: int = 0) -> bytes:
    comps = []
    deps = []
    for i in range(components):
        eco = _ECOSYSTEMS[i % len(_ECOSYSTEMS)]
        name = f"lib{seed}-{i}"
        version = f"{i % 7}.{i % 13}.{i % 29}"
        if eco == "maven":
            group = f"org.example{i % 50}"
            purl = f"pkg:maven/{group}/{name}@{version}"
        elif eco == "golang":
            group = ""
            purl = f"pkg:golang/github.com/example{i % 50}/{name}@v{version}"
        else:
            group = ""
            purl = f"pkg:{eco}/{name}@{version}"
        ref = f"{purl}#{i}"
        comps.append(
            {
                "type": "library",
                "bom-ref": ref,
                **({"group": group} if group else {}),
                "name": name,
                "version": version,
                "purl": purl,
                "hashes": [{"alg": "SHA-256", "content": hashlib.sha256(ref.encode()).hexdigest()}],
                "licenses": [{"license": {"id": "Apache-2.0"}}],
                "supplier": {"name": f"Example {i % 50}"},
                "scope": "required",
            }
        )
        if i:
            deps.append({"ref": comps[(i - 1) // 3]["bom-ref"], "dependsOn": [ref]})
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.UUID(int=seed + components)}",
        "version": 1,
        "metadata": {
            "timestamp": "2026-11-30T00:00:00Z",
            "tools": {"components": [{"type": "application", "name": "bench", "version": "1"}]},
            "component": {"type": "application", "name": "synthetic", "version": "1.0.0"},
        },
        "components": comps,
        "dependencies": deps,
    }
    return orjson.dumps(doc)
