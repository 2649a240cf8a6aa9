"""The demo's sample data (tests/data) loaded through the real ingest endpoints: SBOMs,
vulnerability feeds, OTLP traces, the OnlineBoutique replay, a trust bundle and certificates,
then a ranking run. `SampleLoader` remembers what it sent per database."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from django.conf import settings

from ingest.demo_client import JOB_TIMEOUT_SECONDS, Api, job_summary, problem_text, say
from trustrank.vulns.services.feeds import feed_payload_read

ROOT = Path(settings.BASE_DIR)


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

    def remember(self, key: str) -> None:
        self.loaded.add(key)
        self.memory[self.database_id] = sorted(self.loaded)
        self.memory_file.write_text(json.dumps(self.memory, indent=1))

    def sample_key(self, kind: str, path: Path) -> str:
        return f"{kind}:{_relative(path)}:{file_digest(path)[:16]}"

    def upload_job(
        self, *, method: str, url: str, path: Path, content_type: str, label: str
    ) -> str:
        """Send one file to a receiver that answers 202 + status_url, and wait for the job.
        Returns "done", "failed", "refused", "stalled" or "missing" (the endpoint answered 404)."""
        key = self.sample_key(url.partition("?")[0], path)
        if key in self.loaded:
            say(f"  {label}: already loaded")
            return "done"
        outcome = self.send_job(
            method=method, url=url, body=path.read_bytes(), content_type=content_type, label=label
        )
        if outcome == "done":
            self.remember(key)
        return outcome

    def send_job(
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
            outcome = self.upload_job(
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
        # One OSV import per ecosystem folder, one KEV / EPSS / NVD import per file.
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
        # NVD last: its severities go to the findings of advisories without CVSS.
        for feed in ("kev", "epss", "nvd"):
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
            outcome = self.send_job(
                method="POST",
                url=f"/api/v1/feeds/{feed}",
                body=payload,
                content_type="application/octet-stream",
                label=label,
                headers={"X-Filename": filename},
            )
            if outcome == "done":
                self.remember(key)
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
            key = self.sample_key("traces", path)
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
                self.remember(key)
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
            outcome = self.upload_job(
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
            outcome = self.upload_job(
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
