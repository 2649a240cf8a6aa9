"""The demo's two generated stories, loaded through the API after the samples: the shop
(ingest/demo.py: SBOMs with the services that run them, SPIFFE certificates, live traces,
then a ranking run) and the GPU cluster (ingest/demo_cluster.py: objects, scrapes of the last
hour, then a diagnosis)."""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from datetime import datetime

from ingest.demo_client import problem_text, say
from ingest.demo_samples import SampleLoader
from trustrank.vulns.services.feeds import feed_payload_read


def shop_load(loader: SampleLoader) -> None:
    """The demo's story (ingest/demo.py): a shop whose payment gateway runs Log4j 2.14.1
    behind the internet and logs on every request, and an etcd only its local agent
    calls. Its advisories and EPSS rows, its SBOMs uploaded with the service that runs
    them, SPIFFE certificates issued now, and traces of the last ten minutes; then a
    ranking run, so the home page shows the result at once."""
    from ingest import demo

    folder = loader.data / "demo"
    if not (folder / "advisories-demo.json").is_file() or loader.stalled:
        return
    say(f"loading the demo shop (environment '{demo.ENVIRONMENT}') ...")
    for feed, name in (("osv", "advisories-demo.json"), ("epss", "epss-demo.csv")):
        path = folder / name
        key = loader.sample_key(f"shop-feed-{feed}", path)
        if key in loader.loaded:
            continue
        payload, filename = feed_payload_read(kind=feed, path=str(path))
        if loader.send_job(
            method="POST", url=f"/api/v1/feeds/{feed}", body=payload,
            content_type="application/octet-stream", label=f"{feed} {name}",
            headers={"X-Filename": filename},
        ) == "done":
            loader.remember(key)
    for service, project, version, impact, sbom in demo.SERVICES:
        query = urllib.parse.urlencode({
            "projectName": project, "projectVersion": version, "autoCreate": "true",
            "environment": demo.ENVIRONMENT, "service": service, "human_impact": impact,
        })
        if loader.upload_job(
            method="POST", url=f"/api/v1/sboms?{query}", path=folder / sbom,
            content_type="application/json",
            label=f"{sbom} -> {project} {version}, run by {service}",
        ) == "stalled":
            return
    # One CA and one set of SVIDs for the life of var/: a new CA on a restart would make
    # the certificates already uploaded fail to verify. Remembered by content, so a set
    # issued again (deleted, or rotated before expiry) is sent again.
    certs = demo.shop_certificates_kept(loader.memory_file.parent / "demo-shop-pki")
    certs_key = "shop-certificates:" + hashlib.sha256(
        certs.bundle_pem + b"".join(pem for _service, pem in certs.certificates)
    ).hexdigest()[:16]
    if certs_key not in loader.loaded:
        outcome = loader.send_job(
            method="PUT",
            url=f"/api/v1/environments/{demo.ENVIRONMENT}/trust-bundle"
            f"?trust_domain={demo.TRUST_DOMAIN}",
            body=certs.bundle_pem, content_type="application/x-pem-file",
            label="shop trust bundle",
        )
        for service, pem in certs.certificates:
            outcome = loader.send_job(
                method="POST",
                url=f"/api/v1/certificates?environment={demo.ENVIRONMENT}&service={service}",
                body=pem, content_type="application/x-pem-file",
                label=f"SPIFFE certificate of {service}",
            ) if outcome == "done" else outcome
        if outcome == "done":
            loader.remember(certs_key)
    # Traffic is new on every start, like the OnlineBoutique replay.
    for body in demo.shop_traces():
        status, data, text = loader.api.call(
            "POST", "/v1/traces", body=body, content_type="application/json"
        )
        if status != 200:
            say(f"  shop traces: rejected, {problem_text(status, data, text)}")
    loader.rank()


def gpu_cluster_load(loader: SampleLoader) -> None:
    """The demo's GPU cluster (ingest/demo_cluster.py): its objects once, a dcgm-exporter
    and a vLLM scrape per five-minute slot of the last hour not sent before, then a
    diagnosis at once (not after the load's debounce) so its page has workloads."""
    from ingest import demo_cluster as gpu

    folder = loader.data / "demo"
    objects = folder / gpu.OBJECTS_FILE
    if not objects.is_file() or loader.stalled:
        return
    base = f"/api/v1/clusters/{gpu.CLUSTER}"
    say(f"loading the demo GPU cluster '{gpu.CLUSTER}' ...")
    if loader.upload_job(method="POST", url=f"{base}/objects", path=objects,
                         content_type="application/json",
                         label=f"{gpu.OBJECTS_FILE} (nodes, pods, priority classes)") != "done":
        return
    now = time.time()
    loader.loaded -= {k for k in loader.loaded if k.startswith("gpu-scrape:")
                      and int(k.rpartition(":")[2]) < now - 86_400}
    templates = [(folder / name).read_text() for name in gpu.SCRAPE_FILES]
    sent: list[tuple[str, str]] = []
    for at in gpu.scrape_slots(now=now):
        key = f"gpu-scrape:{gpu.CLUSTER}:{at}"
        for text in [] if key in loader.loaded else templates:
            status, data, answer = loader.api.call(
                "POST", f"{base}/metrics", body=gpu.scrape_at(text, at=at),
                content_type="text/plain; version=0.0.4",
            )
            if status != 202 or data is None:
                say(f"  scrape: rejected, {problem_text(status, data, answer)}")
                return
            sent.append((key, str(data["status_url"])))
    failed = {key for key, url in sent if loader.api.job_wait(url).get("status") != "done"}
    for key in sorted({key for key, _ in sent} - failed):
        loader.remember(key)
    if sent:
        say(f"  {len(sent)} scrapes (dcgm-exporter, vLLM) over the last hour: "
            f"{len(sent) - sum(1 for key, _ in sent if key in failed)} stored")
    else:
        say("  the scrapes of the last hour: already sent")
    _diagnose(loader, base)


def _diagnose(loader: SampleLoader, base: str) -> None:
    status, data, text = loader.api.call("POST", f"{base}/diagnoses", body=b"")
    if status != 202 or data is None:
        say(f"  diagnosis: not started, {problem_text(status, data, text)}")
        return
    asked = datetime.fromisoformat(str(data["requested_at"]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, page, _text = loader.api.call("GET", f"{base}/workloads")
        rows = (page or {}).get("results") or []
        if rows and datetime.fromisoformat(str(rows[0]["updated_at"])) >= asked:
            gpus = sum(1 for row in rows if row.get("gpus"))
            say(f"  diagnosed: {(page or {}).get('count')} workloads, {gpus} holding GPUs")
            return
        time.sleep(0.5)
    say("  the diagnosis did not finish in time; it goes on in the worker")
