"""A 10,000-component CycloneDX 1.5 JSON SBOM through validate, parse and store.

Compared, in the same run and on the same file, with cyclonedx-python-lib's own
JsonStrictValidator plus Bom.from_json. Runs pinned to one core. Needs a database:
DATABASE_URL, or the embedded PostgreSQL when it is unset.

    python bench/sbom_ingest.py [--components 10000] [--skip-reference]

Last line: {"seconds": …, "peak_mb": …, "ratio": …}
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--components", type=int, default=10_000)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    import django

    django.setup()
    import hashlib

    from django.db import transaction

    from bench.sbom_generate import make_bom
    from trustrank.accounts.models import Team
    from trustrank.inventory.models import Project, ProjectVersion
    from trustrank.inventory.services import sbom_store
    from trustrank.parsers.cyclonedx import parse_cyclonedx

    data = make_bom(args.components, seed=int(time.time()))
    print(f"BOM: {args.components} components, {len(data) / 1e6:.1f} MB")
    team, _ = Team.objects.get_or_create(name="bench")
    project, _ = Project.objects.get_or_create(team=team, name="bench-sbom-ingest")
    pv, _ = ProjectVersion.objects.get_or_create(project=project, version="1")
    parse_cyclonedx(make_bom(10))  # load schema files once, as a running worker has

    gc.collect()
    start = time.perf_counter()
    parsed = parse_cyclonedx(data)
    parsed_at = time.perf_counter()
    with transaction.atomic():
        sbom, created = sbom_store(
            project_version=pv, parsed=parsed, digest=hashlib.sha256(data).hexdigest()
        )
    ours = time.perf_counter() - start
    assert created and sbom.component_count == args.components
    print(
        f"TrustRank validate+parse {parsed_at - start:.3f} s, store {ours - (parsed_at - start):.3f} s, total {ours:.3f} s"
    )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _cleanup(sbom)

    ratio = None
    if not args.skip_reference:
        from cyclonedx.model.bom import Bom
        from cyclonedx.schema import SchemaVersion
        from cyclonedx.validation.json import JsonStrictValidator

        text = data.decode()
        start = time.perf_counter()
        error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
        validated_at = time.perf_counter()
        bom = Bom.from_json(json.loads(text))  # type: ignore[attr-defined]
        reference = time.perf_counter() - start
        assert error is None and len(bom.components) == args.components
        print(
            f"cyclonedx-python-lib JsonStrictValidator {validated_at - start:.2f} s, "
            f"Bom.from_json {reference - (validated_at - start):.2f} s, total {reference:.2f} s"
        )
        ratio = round(reference / ours, 1)
    print(json.dumps({"seconds": round(ours, 3), "peak_mb": round(peak_mb), "ratio": ratio}))


def _cleanup(sbom: object) -> None:
    """Remove the bench rows without the ORM's cascade collection (10,000 objects)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inventory_projectversion SET current_sbom_id = NULL WHERE current_sbom_id = %s",
            [sbom.pk],
        )
        cursor.execute("DELETE FROM inventory_componentdependency WHERE sbom_id = %s", [sbom.pk])
        cursor.execute("DELETE FROM inventory_component WHERE sbom_id = %s", [sbom.pk])
        cursor.execute("DELETE FROM inventory_sbom WHERE id = %s", [sbom.pk])


if __name__ == "__main__":
    main()
