#!/usr/bin/env python3
"""TrustRank's two development commands; they need nothing but Python 3.11+.

    python3 dev.py demo   install, then run the web server and a Celery worker with sample data
    python3 dev.py test   install, then run the whole test suite (extra arguments go to pytest)

Both create `.venv` when it is missing and install the project into it (again only when
pyproject.toml changed), then re-run themselves inside it. With no DATABASE_URL the settings
start a private PostgreSQL (pgserver) under var/; with no CELERY_BROKER_URL, Celery uses a
broker kept in files under var/.
"""

# Running processes with fixed argument lists is what this script is for.
# ruff: noqa: S603, S606

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
INSTALL_STAMP = VENV / ".trustrank-install.sha256"
NPM_STAMP = VENV / ".trustrank-npm.sha256"
DATA = ROOT / "tests" / "data"

DEMO_TEAM = "demo"
DEMO_USER = "admin"
DEMO_KEY_NAME = "demo (dev.py)"
DEMO_SCOPES = ["sbom:write", "traces:write", "certs:write", "read", "admin"]
JOB_TIMEOUT_SECONDS = 120
START_TIMEOUT_SECONDS = 120
STOP_TIMEOUT_SECONDS = 20


def say(message: str) -> None:
    print(f"[dev.py] {message}", flush=True)


def fail(message: str, code: int = 1) -> None:
    print(f"[dev.py] error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


# --- Install (runs under whatever python3 started us) -----------------------------------------


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def venv_ensure() -> None:
    if VENV_PYTHON.exists():
        return
    say(f"creating the virtual environment {VENV} ...")
    result = subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=False)
    if result.returncode != 0:
        fail(
            "could not create .venv with `python3 -m venv` (on Debian/Ubuntu install the "
            "python3-venv package), then run this command again"
        )


def project_install() -> None:
    """pip install -e '.[dev]', skipped when pyproject.toml is unchanged since the last one."""
    wanted = file_digest(ROOT / "pyproject.toml")
    if INSTALL_STAMP.exists() and INSTALL_STAMP.read_text().strip() == wanted:
        return
    say("installing the project and its development tools into .venv (pip; a few minutes "
        "the first time) ...")
    started = time.monotonic()
    result = subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "-e", ".[dev]"],
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        fail("pip install failed (see above); nothing was recorded, the next run tries again")
    INSTALL_STAMP.write_text(wanted + "\n")
    say(f"installed in {time.monotonic() - started:.0f} s")


def npm_install() -> None:
    """`npm ci` when the repository has a package.json with a lock file."""
    package, lock = ROOT / "package.json", ROOT / "package-lock.json"
    if not (package.exists() and lock.exists()):
        return
    wanted = file_digest(package, lock)
    if (
        NPM_STAMP.exists()
        and NPM_STAMP.read_text().strip() == wanted
        and (ROOT / "node_modules").is_dir()
    ):
        return
    npm = shutil.which("npm")
    if npm is None:
        say(
            "WARNING: npm is not installed, so the front-end packages in package.json were not "
            "installed; pages that use them (the service map) will lack them. Install Node.js "
            "and npm, then run this command again."
        )
        return
    say("installing front-end packages (npm ci) ...")
    result = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=ROOT, check=False)
    if result.returncode != 0:
        fail("npm ci failed (see above)")
    NPM_STAMP.write_text(wanted + "\n")


# --- Shared by both commands (inside the venv) --------------------------------------------------


def var_dir() -> Path:
    return Path(os.environ.get("TRUSTRANK_VAR_DIR") or ROOT / "var")


def embedded_postgres_pid() -> int | None:
    """The pid of the embedded PostgreSQL when it runs (None with an external database)."""
    if os.environ.get("DATABASE_URL"):
        return None
    pid_file = var_dir() / "pgdata" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


def embedded_postgres_stop(pid: int) -> None:
    """Fast shutdown (SIGINT, as `pg_ctl stop -m fast`) of the server this command started."""
    say("stopping the embedded PostgreSQL ...")
    try:
        os.kill(pid, signal.SIGINT)
    except OSError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.2)


def run_tests(args: list[str]) -> int:
    was_running = embedded_postgres_pid()
    # pytest and its children (worker, gunicorn) share our terminal's process group and get
    # Ctrl-C themselves; this process only waits for pytest's exit code.
    # (A handler, not SIG_IGN: an ignored signal would stay ignored in pytest too.)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    code = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, check=False).returncode
    started = embedded_postgres_pid()
    if was_running is None and started is not None:
        embedded_postgres_stop(started)
    return code


# --- Demo ----------------------------------------------------------------------------------------


class Child:
    """A long-running process of the demo (gunicorn, the Celery worker), logging to a file."""

    def __init__(self, *, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = log.open("ab")
        # A session of its own: Ctrl-C reaches only dev.py, which stops the children in order.
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log_handle, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.alive():
            try:
                # The main process only: gunicorn's master and celery's main process stop their
                # own children in order (a group-wide signal makes celery's shutdown hang).
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                say(f"{self.name} did not stop in {STOP_TIMEOUT_SECONDS} s; killing it")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # Anything the main process left behind in its session.
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log_handle.close()


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
        timeout: float = 120,
    ) -> tuple[int, dict[str, Any] | None, str]:
        request = urllib.request.Request(  # noqa: S310 (our own server, http://127.0.0.1)
            self.base_url + path, data=body, method=method,
            headers={"X-Api-Key": self.key, "Accept": "application/json"},
        )
        if content_type:
            request.add_header("Content-Type", content_type)
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

    def __init__(self, *, api: Api, database_id: str, env: dict[str, str]) -> None:
        self.api = api
        self.env = env
        self.memory_file = var_dir() / "demo-samples.json"
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
        return f"{kind}:{path.relative_to(ROOT)}:{file_digest(path)[:16]}"

    def _upload_job(
        self, *, method: str, url: str, path: Path, content_type: str, label: str
    ) -> str:
        """Send one file to a receiver that answers 202 + status_url, and wait for the job.
        Returns "done", "failed", "refused", "stalled" or "missing" (the endpoint answered 404)."""
        if self.stalled:
            return "stalled"
        key = self._key(url.partition("?")[0], path)
        if key in self.loaded:
            say(f"  {label}: already loaded")
            return "done"
        status, data, text = self.api.call(
            method, url, body=path.read_bytes(), content_type=content_type
        )
        if status == 404:
            return "missing"
        if status != 202 or data is None or "status_url" not in data:
            say(f"  {label}: rejected, {problem_text(status, data, text)}")
            return "refused"
        job = self.api.job_wait(str(data["status_url"]))
        say(f"  {label}: {job_summary(job)}")
        if job.get("status") == "done":
            self._remember(key)
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
        files = sample_files(DATA / "sbom", (".json", ".xml"))
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

    def feeds(self, commands: dict[str, object]) -> None:
        folder = DATA / "advisories"
        if not folder.is_dir() or self.stalled:
            return
        if "import_feed" not in commands:
            say("tests/data/advisories exists but `manage.py import_feed` does not: skipping")
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
            say(f"importing {len(imports)} sample feeds (manage.py import_feed --wait) ...")
        for feed, path in imports:
            key = f"feed:{feed}:{path.relative_to(ROOT)}:{tree_digest(path)}"
            label = f"{feed} {path.relative_to(folder)}"
            if key in self.loaded:
                say(f"  {label}: already imported")
                continue
            result = subprocess.run(
                [sys.executable, "manage.py", "import_feed", feed, str(path), "--wait",
                 "--timeout", str(JOB_TIMEOUT_SECONDS)],
                cwd=ROOT, env=self.env, check=False, capture_output=True, text=True,
            )
            # The command's own verdict: its last line on stdout, or on stderr when it failed.
            output = result.stdout if result.returncode == 0 else result.stderr
            lines = output.strip().splitlines()
            say(f"  {label}: {lines[-1] if lines else 'exit code ' + str(result.returncode)}")
            if result.returncode == 0:
                self._remember(key)
            elif "did not finish" in result.stdout + result.stderr:
                self.stalled = True
                say("  the worker is not finishing jobs (see var/log/worker.log)")
                return

    def traces(self) -> None:
        folder = DATA / "traces"
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
        if not NEZHA_CSV.exists():
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
        files = sample_files(DATA / "certs", (".pem", ".crt", ".der", ".json"))
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


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As gunicorn does: connections of a previous run in TIME_WAIT do not block the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(check: Callable[[], bool], children: list[Child], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"{child.name} exited while starting:\n{child.log_tail()}")
        if check():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready after {START_TIMEOUT_SECONDS} s")


def http_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our own server)
            return response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except OSError:
        return False


def demo_env() -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "trustrank.settings"
    env["PYTHONUNBUFFERED"] = "1"
    # The demo is served over plain http://127.0.0.1: secure-only cookies would never come back.
    env.setdefault("SESSION_COOKIE_SECURE", "false")
    if env.get("DATABASE_URL") and not (env.get("SECRET_KEY") or env.get("SECRET_KEY_FILE")):
        # An external database makes the settings insist on a key; the demo keeps one in var/.
        key_file = var_dir() / "secret_key"
        key_file.parent.mkdir(parents=True, exist_ok=True)
        if not key_file.exists():
            key_file.write_text(secrets.token_urlsafe(50))
            key_file.chmod(0o600)
        env["SECRET_KEY_FILE"] = str(key_file)
    return env


def manage(env: dict[str, str], *args: str) -> None:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed with exit code {result.returncode}")


def demo_accounts() -> tuple[str, str]:
    """The demo team, its admin (a new random password each run) and a new team API key."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from trustrank.accounts.models import ApiKey, Role
    from trustrank.accounts.services import (
        api_key_issue,
        api_key_revoke,
        membership_set,
        team_get_or_create,
    )

    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        team = team_get_or_create(name=DEMO_TEAM)
        user, _ = get_user_model().objects.get_or_create(username=DEMO_USER)
        user.is_staff = True
        user.is_superuser = True
        user.set_password(password)
        user.save()
        membership_set(team=team, user=user, role=Role.ADMIN)
        # The previous run's demo key was printed on its screen only; retire it.
        for old in ApiKey.objects.filter(team=team, name=DEMO_KEY_NAME, revoked_at__isnull=True):
            api_key_revoke(api_key=old)
        key = api_key_issue(team=team, name=DEMO_KEY_NAME, scopes=DEMO_SCOPES, created_by=user)
    return password, key.secret


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


def run_demo() -> int:
    env = demo_env()
    port = int(env.get("PORT") or 8000)
    if not port_free(port):
        fail(f"port {port} on 127.0.0.1 is in use; stop what uses it or set PORT=<another port>")
    was_running = embedded_postgres_pid()
    log_dir = var_dir() / "log"
    children: list[Child] = []
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    exit_code = 0
    try:
        say("database migrations ...")
        manage(env, "migrate", "--noinput", "-v", "0")
        say("collecting static files ...")
        manage(env, "collectstatic", "--noinput", "-v", "0")

        os.environ.update(env)
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import get_commands
        from django.db import connections

        password, key = demo_accounts()
        database_id = database_identity()
        connections.close_all()

        base_url = f"http://127.0.0.1:{port}"
        queues = f"{settings.INGEST_HIGH_QUEUE},{settings.INGEST_QUEUE}"
        say(f"starting gunicorn on {base_url} and a Celery worker on {queues} (logs in {log_dir})")
        children.append(Child(
            name="gunicorn",
            argv=[sys.executable, "-m", "gunicorn", "trustrank.wsgi:application",
                  "--bind", f"127.0.0.1:{port}", "--workers", env.get("WEB_CONCURRENCY", "2"),
                  "--timeout", "120", "--access-logfile", "-"],
            env=env, log=log_dir / "gunicorn.log",
        ))
        worker_log = log_dir / "worker.log"
        worker_log_start = worker_log.stat().st_size if worker_log.exists() else 0
        children.append(Child(
            name="celery worker",
            # -B: embedded beat, for the periodic sweep that re-enqueues stranded jobs.
            argv=[sys.executable, "-m", "celery", "-A", "trustrank", "worker", "-B",
                  "-Q", queues, "-l", "info", "-n", "demo@%h",
                  "--without-gossip", "--without-mingle"],
            env=env, log=worker_log,
        ))

        def worker_ready() -> bool:
            with worker_log.open("rb") as handle:
                handle.seek(worker_log_start)
                return b" ready." in handle.read()

        wait_until(lambda: http_ready(base_url + "/login/"), children, "gunicorn")
        wait_until(worker_ready, children, "the Celery worker")

        loader = SampleLoader(api=Api(base_url=base_url, key=key), database_id=database_id, env=env)
        loader.sboms()
        loader.feeds(get_commands())
        loader.traces()
        loader.boutique_replay()
        loader.certificates()

        print(
            "\n"
            f"  TrustRank is running at {base_url}/\n"
            f"  Log in as:   {DEMO_USER}\n"
            f"  Password:    {password}\n"
            f"  API key:     {key}   (team {DEMO_TEAM}; scopes {', '.join(DEMO_SCOPES)})\n"
            f"  API docs:    {base_url}/api/docs/\n"
            f"  Logs:        {log_dir}/gunicorn.log, {worker_log}\n"
            "\n  Press Ctrl-C to stop.\n",
            flush=True,
        )
        while True:
            for child in children:
                if not child.alive():
                    raise RuntimeError(
                        f"{child.name} stopped unexpectedly (exit code {child.proc.returncode}):\n"
                        f"{child.log_tail()}"
                    )
            time.sleep(1)
    except KeyboardInterrupt:
        print(flush=True)
        say("stopping ...")
    except RuntimeError as exc:
        say(f"error: {exc}")
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for child in reversed(children):
            child.stop()
        started = embedded_postgres_pid()
        if was_running is None and started is not None:
            embedded_postgres_stop(started)
        say("stopped")
    return exit_code


# --- Entry point -------------------------------------------------------------------------------


USAGE = """usage: python3 dev.py demo          install, run the demo (web + worker + sample data)
       python3 dev.py test [ARGS...]  install, run the test suite (ARGS go to pytest)"""


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 (run by any python3 on the machine)
        fail("TrustRank needs Python 3.11 or newer")
    if not argv or argv[0] not in ("demo", "test"):
        print(USAGE, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "demo" and rest:
        fail(f"`dev.py demo` takes no arguments (got {' '.join(rest)}); PORT=… sets the port")
    if os.environ.pop("TRUSTRANK_DEV_INSTALLED", "") != "1":
        if not in_venv():
            venv_ensure()
        project_install()
        npm_install()
    if not in_venv():
        # Everything else runs with the project's own interpreter and packages.
        os.environ["TRUSTRANK_DEV_INSTALLED"] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(ROOT / "dev.py"), *argv])
    os.chdir(ROOT)
    if command == "test":
        return run_tests(rest)
    return run_demo()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
