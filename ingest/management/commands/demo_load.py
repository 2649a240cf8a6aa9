"""python manage.py demo_load --url http://127.0.0.1:8000 [--key KEY] [--data tests/data]

Loads the demo's sample data (tests/data) into a running TrustRank through its public API,
as any pipeline, collector or operator would: SBOMs, vulnerability feeds, OTLP traces, a
trust bundle and certificates, a GPU cluster (objects, dcgm-exporter and vLLM scrapes), each
with the demo team's API key (`--key`, or the TRUSTRANK_DEMO_API_KEY environment variable,
which keeps it out of the process list).
`python3 dev.py demo` runs it once the web server and the worker are up.

What was loaded is remembered in var/demo-samples.json under the database's identity, so a
second run does not post the traces again (they add up) but a fresh database gets everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.vulns.services.feeds import feed_payload_read

ROOT = Path(settings.BASE_DIR)
JOB_TIMEOUT_SECONDS = 120

# Set by the command so the loader's messages go where the command writes.
_write: Callable[[str], None] = print


def say(message: str) -> None:
    _write(f"[demo_load] {message}")


def file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _relative(path: Path) -> Path:
    try:
        return path.resolve().relative_to(ROOT.resolve())
    except ValueError:
        return path


class Api:
    """Minimal HTTP client for the running server (standard library only)."""

    def __init__(self, *, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key

    def call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "",
        headers: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> tuple[int, dict[str, Any] | None, str]:
        request = urllib.request.Request(  # noqa: S310 (the demo server, http://)
            self.base_url + path, data=body, method=method,
            headers={"X-Api-Key": self.key, "Accept": "application/json"},
        )
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        text = raw.decode("utf-8", "replace")
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        return status, data if isinstance(data, dict) else None, text

    def job_wait(self, status_url: str) -> dict[str, Any]:
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            status, job, text = self.call("GET", status_url)
            if status != 200 or job is None:
                error = f"GET {status_url} answered {status}: {text[:300]}"
                return {"status": "failed", "error": error}
            if job.get("status") in ("done", "failed"):
                return job
            time.sleep(0.5)
        return {"status": "timeout", "error": f"still not finished after {JOB_TIMEOUT_SECONDS} s"}


def problem_text(status: int, data: dict[str, Any] | None, text: str) -> str:
    if data is not None:
        return str(data.get("detail") or data.get("title") or data)[:300]
    return f"HTTP {status}: {text[:300]}"


def job_summary(job: dict[str, Any]) -> str:
    if job.get("status") == "done":
        counts = job.get("counts") or {}
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if not str(k).startswith("_"))
        return f"done ({shown})" if shown else "done"
    return f"FAILED: {job.get('error') or 'no message'}"


def sbom_project(path: Path) -> tuple[str, str]:
    """Project name and version from the SBOM's described component, else from the file name."""
    name, version = "", ""
    try:
        if path.suffix == ".json":
            metadata = json.loads(path.read_bytes()).get("metadata") or {}
            component = metadata.get("component") or {}
            group = component.get("group") or ""
            name = f"{group}/{component['name']}" if group and component.get("name") else ""
            name = name or component.get("name") or ""
            version = component.get("version") or ""
        else:
            root = ET.parse(path).getroot()  # noqa: S314
            ns = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
            component = root.find(f"{ns}metadata/{ns}component")
            if component is not None:
                name = (component.findtext(f"{ns}name") or "").strip()
                group = (component.findtext(f"{ns}group") or "").strip()
                name = f"{group}/{name}" if group and name else name
                version = (component.findtext(f"{ns}version") or "").strip()
    except (OSError, ValueError, KeyError, AttributeError, ET.ParseError):
        pass
    return (name or path.stem)[:200], (version or "0")[:100]


# Sample files made to be rejected (the tests' bad inputs) are not demo data.
REJECT_MARKERS = (
    "invalid", "bad", "xxe", "bomb", "malformed", "broken", "reject", "corrupt", "wrong",
    "not-pem", "no_keys", "no-keys",
)


def sample_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir()
        if p.is_file()
        and p.name.endswith(suffixes)
        and not any(marker in p.name.lower() for marker in REJECT_MARKERS)
    )


class SampleLoader:
    """Loads tests/data through the real ingest endpoints, once per database.

    Remembers what it loaded in var/demo-samples.json under the database's identity, so a
    second `dev.py demo` does not post the traces again (they add up) but a fresh database
    gets everything.
    """

    def __init__(self, *, api: Api, database_id: str, data: Path, memory_file: Path) -> None:
        self.api = api
        self.data = data
        self.memory_file = memory_file
        try:
            self.memory: dict[str, list[str]] = json.loads(self.memory_file.read_text())
        except (OSError, ValueError):
            self.memory = {}
        self.database_id = database_id
        self.loaded = set(self.memory.get(database_id, []))
        # Set when a job never finishes: the worker is not working, waiting on more is futile.
        self.stalled = False

    def _remember(self, key: str) -> None:
        self.loaded.add(key)
        self.memory[self.database_id] = sorted(self.loaded)
        self.memory_file.write_text(json.dumps(self.memory, indent=1))

    def _key(self, kind: str, path: Path) -> str:
        return f"{kind}:{_relative(path)}:{file_digest(path)[:16]}"

    def _upload_job(
        self, *, method: str, url: str, path: Path, content_type: str, label: str
    ) -> str:
        """Send one file to a receiver that answers 202 + status_url, and wait for the job.
        Returns "done", "failed", "refused", "stalled" or "missing" (the endpoint answered 404)."""
        key = self._key(url.partition("?")[0], path)
        if key in self.loaded:
            say(f"  {label}: already loaded")
            return "done"
        outcome = self._send_job(
            method=method, url=url, body=path.read_bytes(), content_type=content_type, label=label
        )
        if outcome == "done":
            self._remember(key)
        return outcome

    def _send_job(
        self,
        *,
        method: str,
        url: str,
        body: bytes,
        content_type: str,
        label: str,
        headers: dict[str, str] | None = None,
    ) -> str:
        if self.stalled:
            return "stalled"
        status, data, text = self.api.call(
            method, url, body=body, content_type=content_type, headers=headers
        )
        if status == 404:
            return "missing"
        if status != 202 or data is None or "status_url" not in data:
            say(f"  {label}: rejected, {problem_text(status, data, text)}")
            return "refused"
        job = self.api.job_wait(str(data["status_url"]))
        say(f"  {label}: {job_summary(job)}")
        if job.get("status") == "done":
            return "done"
        if job.get("status") == "timeout":
            self.stalled = True
            say(
                "  the worker is not finishing jobs (see var/log/worker.log); "
                "no more samples are loaded"
            )
            return "stalled"
        return "failed"

    def sboms(self) -> None:
        files = sample_files(self.data / "sbom", (".json", ".xml"))
        if not files:
            say("no sample SBOMs in tests/data/sbom")
            return
        say(f"loading {len(files)} sample SBOMs through POST /api/v1/sboms ...")
        for path in files:
            name, version = sbom_project(path)
            query = urllib.parse.urlencode(
                {"projectName": name, "projectVersion": version, "autoCreate": "true"}
            )
            outcome = self._upload_job(
                method="POST",
                url=f"/api/v1/sboms?{query}",
                path=path,
                content_type="application/json" if path.suffix == ".json" else "application/xml",
                label=f"{path.name} -> {name} {version}",
            )
            if outcome == "missing":
                say("  POST /api/v1/sboms answers 404 (not available): skipping SBOMs")
                return
            if outcome == "stalled":
                return

    def feeds(self) -> None:
        """Each sample feed through POST /api/v1/feeds/<kind> (the demo key has `admin`); a
        folder of OSV records is sent as one zip, as `import_feed` stores it."""
        folder = self.data / "advisories"
        if not folder.is_dir() or self.stalled:
            return
        # One OSV import per ecosystem folder, one KEV / EPSS import per file.
        imports: list[tuple[str, Path]] = []
        osv = folder / "osv"
        if osv.is_dir():
            if any(p.suffix == ".json" for p in osv.iterdir()):
                imports.append(("osv", osv))
            else:
                imports += [
                    ("osv", d) for d in sorted(osv.iterdir())
                    if d.is_dir() and d.name != "edge"
                    and not any(m in d.name.lower() for m in REJECT_MARKERS)
                ]
        for feed in ("kev", "epss"):
            imports += [(feed, f) for f in sample_files(folder / feed, (".json", ".csv", ".gz"))]
        if imports:
            say(f"importing {len(imports)} sample feeds through POST /api/v1/feeds/<kind> ...")
        for feed, path in imports:
            key = f"feed:{feed}:{_relative(path)}:{tree_digest(path)}"
            label = f"{feed} {path.relative_to(folder)}"
            if key in self.loaded:
                say(f"  {label}: already imported")
                continue
            payload, filename = feed_payload_read(kind=feed, path=str(path))
            outcome = self._send_job(
                method="POST",
                url=f"/api/v1/feeds/{feed}",
                body=payload,
                content_type="application/octet-stream",
                label=label,
                headers={"X-Filename": filename},
            )
            if outcome == "done":
                self._remember(key)
            elif outcome == "missing":
                say("  POST /api/v1/feeds answers 404 (not available): skipping feeds")
                return
            elif outcome == "stalled":
                return

    def traces(self) -> None:
        folder = self.data / "traces"
        if not folder.is_dir() or self.stalled:
            return
        files = [
            p for p in sorted(folder.rglob("*"))
            if p.is_file() and (p.suffix in (".pb", ".bin") or looks_like_otlp_json(p))
        ]
        if not files:
            return
        say(f"sending {len(files)} sample OTLP trace exports to POST /v1/traces ...")
        for path in files:
            key = self._key("traces", path)
            if key in self.loaded:
                say(f"  {path.name}: already sent")
                continue
            protobuf = path.suffix != ".json"
            content_type = "application/x-protobuf" if protobuf else "application/json"
            status, data, text = self.api.call(
                "POST", "/v1/traces", body=path.read_bytes(), content_type=content_type
            )
            if status == 404:
                say("  POST /v1/traces answers 404 (not available): skipping traces")
                return
            if status == 200:
                rejected = (data or {}).get("partialSuccess", {}).get("rejectedSpans")
                note = f" ({rejected} spans rejected)" if rejected else ""
                say(f"  {path.name}: accepted{note}")
                self._remember(key)
            else:
                say(f"  {path.name}: rejected, {problem_text(status, data, text)}")

    def boutique_replay(self) -> None:
        """The real OnlineBoutique call graph of tests/data/traces (Nezha's span CSV), moved
        to end now and exported per service as each service's SDK would, so the service map
        shows live edges, an ingress and latencies in its default one-hour window. Sent on
        every start: it is new traffic each time."""
        if self.stalled:
            return
        try:
            from tests.runtime.helpers import NEZHA_CSV, nezha_requests, nezha_spans
        except ImportError as exc:  # the dev extra (opentelemetry-sdk) is missing
            say(f"  skipping the OnlineBoutique replay ({exc})")
            return
        # Only with the repository's own samples (a --data folder of one's own has no replay).
        if not NEZHA_CSV.exists() or not NEZHA_CSV.resolve().is_relative_to(self.data.resolve()):
            return
        spans = nezha_spans()
        shift = time.time_ns() - max(s.end_ns for s in spans)
        spans = [replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift) for s in spans]
        requests = nezha_requests(spans, env="boutique")
        say(f"replaying the OnlineBoutique call graph ({len(spans)} spans, "
            f"{len(requests)} services) to POST /v1/traces, environment 'boutique' ...")
        for service, body in requests.items():
            status, data, text = self.api.call(
                "POST", "/v1/traces", body=body, content_type="application/x-protobuf"
            )
            if status != 200:
                say(f"  {service}: rejected, {problem_text(status, data, text)}")

    def certificates(self) -> None:
        """A SPIFFE trust bundle first (PUT), then the certificates (POST), in the
        environment `default`."""
        files = sample_files(self.data / "certs", (".pem", ".crt", ".der", ".json"))
        bundles = [p for p in files if "bundle" in p.name.lower()]
        certificates = [p for p in files if p.suffix != ".json" and p not in bundles]
        if not (bundles or certificates) or self.stalled:
            return
        say("loading sample certificates (PUT trust bundle, POST /api/v1/certificates) ...")
        if bundles:
            outcome = self._upload_job(
                method="PUT",
                url="/api/v1/environments/default/trust-bundle",
                path=bundles[0],
                content_type=cert_content_type(bundles[0]),
                label=f"{bundles[0].name} (trust bundle)",
            )
            if outcome in ("missing", "stalled"):
                if outcome == "missing":
                    say("  the trust-bundle endpoint answers 404 (not available): skipping")
                return
        for path in certificates:
            outcome = self._upload_job(
                method="POST",
                url="/api/v1/certificates",
                path=path,
                content_type=cert_content_type(path),
                label=path.name,
            )
            if outcome in ("missing", "stalled"):
                if outcome == "missing":
                    say("  POST /api/v1/certificates answers 404 (not available): skipping")
                return


    def shop(self) -> None:
        """The demo's story (ingest/demo.py): a shop whose payment gateway runs Log4j 2.14.1
        behind the internet and logs on every request, and an etcd only its local agent
        calls. Its advisories and EPSS rows, its SBOMs uploaded with the service that runs
        them, SPIFFE certificates issued now, and traces of the last ten minutes; then a
        ranking run, so the home page shows the result at once."""
        from ingest import demo

        folder = self.data / "demo"
        if not (folder / "advisories-demo.json").is_file() or self.stalled:
            return
        say(f"loading the demo shop (environment '{demo.ENVIRONMENT}') ...")
        for feed, name in (("osv", "advisories-demo.json"), ("epss", "epss-demo.csv")):
            path = folder / name
            key = self._key(f"shop-feed-{feed}", path)
            if key in self.loaded:
                continue
            payload, filename = feed_payload_read(kind=feed, path=str(path))
            if self._send_job(
                method="POST", url=f"/api/v1/feeds/{feed}", body=payload,
                content_type="application/octet-stream", label=f"{feed} {name}",
                headers={"X-Filename": filename},
            ) == "done":
                self._remember(key)
        for service, project, version, impact, sbom in demo.SERVICES:
            query = urllib.parse.urlencode({
                "projectName": project, "projectVersion": version, "autoCreate": "true",
                "environment": demo.ENVIRONMENT, "service": service, "human_impact": impact,
            })
            if self._upload_job(
                method="POST", url=f"/api/v1/sboms?{query}", path=folder / sbom,
                content_type="application/json",
                label=f"{sbom} -> {project} {version}, run by {service}",
            ) == "stalled":
                return
        # One CA and one set of SVIDs for the life of var/: a new CA on a restart would make
        # the certificates already uploaded fail to verify. Remembered by content, so a set
        # issued again (deleted, or rotated before expiry) is sent again.
        certs = demo.shop_certificates_kept(self.memory_file.parent / "demo-shop-pki")
        certs_key = "shop-certificates:" + hashlib.sha256(
            certs.bundle_pem + b"".join(pem for _service, pem in certs.certificates)
        ).hexdigest()[:16]
        if certs_key not in self.loaded:
            outcome = self._send_job(
                method="PUT",
                url=f"/api/v1/environments/{demo.ENVIRONMENT}/trust-bundle"
                f"?trust_domain={demo.TRUST_DOMAIN}",
                body=certs.bundle_pem, content_type="application/x-pem-file",
                label="shop trust bundle",
            )
            for service, pem in certs.certificates:
                outcome = self._send_job(
                    method="POST",
                    url=f"/api/v1/certificates?environment={demo.ENVIRONMENT}&service={service}",
                    body=pem, content_type="application/x-pem-file",
                    label=f"SPIFFE certificate of {service}",
                ) if outcome == "done" else outcome
            if outcome == "done":
                self._remember(certs_key)
        # Traffic is new on every start, like the OnlineBoutique replay.
        for body in demo.shop_traces():
            status, data, text = self.api.call(
                "POST", "/v1/traces", body=body, content_type="application/json"
            )
            if status != 200:
                say(f"  shop traces: rejected, {problem_text(status, data, text)}")
        self.rank()

    def gpu_cluster(self) -> None:
        """The demo's GPU cluster (ingest/demo_cluster.py): its objects once, a dcgm-exporter
        and a vLLM scrape per five-minute slot of the last hour not sent before, then a
        diagnosis at once (not after the load's debounce) so its page has workloads."""
        from ingest import demo_cluster as gpu

        folder = self.data / "demo"
        objects = folder / gpu.OBJECTS_FILE
        if not objects.is_file() or self.stalled:
            return
        base = f"/api/v1/clusters/{gpu.CLUSTER}"
        say(f"loading the demo GPU cluster '{gpu.CLUSTER}' ...")
        if self._upload_job(method="POST", url=f"{base}/objects", path=objects,
                            content_type="application/json",
                            label=f"{gpu.OBJECTS_FILE} (nodes, pods, priority classes)") != "done":
            return
        now = time.time()
        self.loaded -= {k for k in self.loaded if k.startswith("gpu-scrape:")
                        and int(k.rpartition(":")[2]) < now - 86_400}
        templates = [(folder / name).read_text() for name in gpu.SCRAPE_FILES]
        sent: list[tuple[str, str]] = []
        for at in gpu.scrape_slots(now=now):
            key = f"gpu-scrape:{gpu.CLUSTER}:{at}"
            for text in [] if key in self.loaded else templates:
                status, data, answer = self.api.call(
                    "POST", f"{base}/metrics", body=gpu.scrape_at(text, at=at),
                    content_type="text/plain; version=0.0.4",
                )
                if status != 202 or data is None:
                    say(f"  scrape: rejected, {problem_text(status, data, answer)}")
                    return
                sent.append((key, str(data["status_url"])))
        failed = {key for key, url in sent if self.api.job_wait(url).get("status") != "done"}
        for key in sorted({key for key, _ in sent} - failed):
            self._remember(key)
        if sent:
            say(f"  {len(sent)} scrapes (dcgm-exporter, vLLM) over the last hour: "
                f"{len(sent) - sum(1 for key, _ in sent if key in failed)} stored")
        else:
            say("  the scrapes of the last hour: already sent")
        self._diagnose(base)

    def _diagnose(self, base: str) -> None:
        status, data, text = self.api.call("POST", f"{base}/diagnoses", body=b"")
        if status != 202 or data is None:
            say(f"  diagnosis: not started, {problem_text(status, data, text)}")
            return
        asked = datetime.fromisoformat(str(data["requested_at"]))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status, page, _text = self.api.call("GET", f"{base}/workloads")
            rows = (page or {}).get("results") or []
            if rows and datetime.fromisoformat(str(rows[0]["updated_at"])) >= asked:
                gpus = sum(1 for row in rows if row.get("gpus"))
                say(f"  diagnosed: {(page or {}).get('count')} workloads, {gpus} holding GPUs")
                return
            time.sleep(0.5)
        say("  the diagnosis did not finish in time; it goes on in the worker")

    def rank(self) -> None:
        """Rank now (POST /api/v1/ranking-runs) and wait, instead of the debounce delay."""
        if self.stalled:
            return
        # The trace jobs must be in first: wait for the queue to drain.
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            status, data, _text = self.api.call("GET", "/api/v1/jobs?status=queued")
            if status != 200 or not (data or {}).get("count"):
                break
            time.sleep(0.5)
        status, data, text = self.api.call("POST", "/api/v1/ranking-runs", body=b"{}",
                                           content_type="application/json")
        if status != 202 or data is None:
            say(f"  ranking: not started, {problem_text(status, data, text)}")
            return
        url = str(data["status_url"])
        while time.monotonic() < deadline + JOB_TIMEOUT_SECONDS:
            status, run, _text = self.api.call("GET", url)
            if run and run.get("status") in ("done", "failed"):
                counts = run.get("counts") or {}
                say(f"  ranking run {run['id']}: {run['status']}, "
                    f"{counts.get('findings', 0)} findings ranked"
                    + (f" ({run.get('error')})" if run.get("error") else ""))
                return
            time.sleep(0.5)
        say("  ranking run did not finish in time; it goes on in the worker")


def cert_content_type(path: Path) -> str:
    if path.suffix == ".json":
        return "application/json"
    if path.read_bytes().lstrip().startswith(b"-----BEGIN"):
        return "application/x-pem-file"
    return "application/pkix-cert"


def looks_like_otlp_json(path: Path) -> bool:
    if path.suffix != ".json" or path.stat().st_size > 50 * 1024 * 1024:
        return False
    try:
        return "resourceSpans" in json.loads(path.read_bytes())
    except (ValueError, TypeError):
        return False


def tree_digest(folder: Path) -> str:
    if folder.is_file():
        return file_digest(folder)[:16]
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(file_digest(path).encode())
    return digest.hexdigest()[:16]


def database_identity() -> str:
    """Identifies the database the demo writes to, across restarts (see SampleLoader)."""
    from django.db import connection

    with connection.cursor() as cursor:
        try:
            cursor.execute("SELECT system_identifier::text FROM pg_control_system()")
            cluster = cursor.fetchone()[0]
        except Exception:  # not allowed to a non-superuser: fall back to host and port
            settings_dict = connection.settings_dict
            cluster = f"{settings_dict.get('HOST')}:{settings_dict.get('PORT')}"
    return f"{cluster}/{connection.settings_dict['NAME']}"



class Command(BaseCommand):
    help = "Load the demo's sample data into a running TrustRank through its HTTP API."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server")
        parser.add_argument(
            "--key", default="", help="API key (default: $TRUSTRANK_DEMO_API_KEY)"
        )
        parser.add_argument("--data", default=str(ROOT / "tests" / "data"), help="sample folder")

    def handle(self, *args: Any, **options: Any) -> None:
        global _write
        key = options["key"] or os.environ.get("TRUSTRANK_DEMO_API_KEY", "")
        if not key:
            raise CommandError("give the API key with --key or TRUSTRANK_DEMO_API_KEY")

        def write(message: str) -> None:
            self.stdout.write(message)
            self.stdout.flush()

        _write = write
        loader = SampleLoader(
            api=Api(base_url=options["url"].rstrip("/"), key=key),
            database_id=database_identity(),
            data=Path(options["data"]),
            memory_file=Path(settings.VAR_DIR) / "demo-samples.json",
        )
        loader.sboms()
        loader.feeds()
        loader.traces()
        loader.boutique_replay()
        loader.certificates()
        loader.gpu_cluster()
        loader.shop()
        if loader.stalled:
            raise CommandError("the worker stopped finishing jobs; see var/log/worker.log")
