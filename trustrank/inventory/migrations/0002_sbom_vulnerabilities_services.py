"""SBOMs keep their parsed vulnerabilities (VDR/VEX) and services; matching no longer re-reads
the raw upload. Existing SBOMs are filled from their stored payloads once, here."""

import gzip
import logging

from django.db import migrations, models

log = logging.getLogger(__name__)


def fill_from_payloads(apps, schema_editor):
    from trustrank.parsers.cyclonedx import BomError, parse_cyclonedx
    from trustrank.parsers.cyclonedx_vulns import vulnerability_to_json

    Sbom = apps.get_model("inventory", "Sbom")
    IngestPayload = apps.get_model("ingest", "IngestPayload")
    for sbom in Sbom.objects.filter(job__isnull=False).only("pk", "job_id").iterator():
        data = IngestPayload.objects.filter(job_id=sbom.job_id).values_list("data", flat=True)
        raw = data.first()
        if not raw:
            continue
        raw = bytes(raw)
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        try:
            parsed = parse_cyclonedx(raw)
        except BomError as exc:
            log.warning("SBOM %s: stored payload not parsed again: %s", sbom.pk, exc)
            continue
        Sbom.objects.filter(pk=sbom.pk).update(
            vulnerabilities=[vulnerability_to_json(v) for v in parsed.vulnerabilities],
            services=[s.as_dict() for s in parsed.services],
        )


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0001_initial"),
        ("ingest", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="sbom",
            name="services",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="sbom",
            name="vulnerabilities",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(fill_from_payloads, migrations.RunPython.noop),
    ]
