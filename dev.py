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
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
INSTALL_STAMP = VENV / ".trustrank-install.sha256"
NPM_STAMP = VENV / ".trustrank-npm.sha256"

DEMO_TEAM = "demo"
DEMO_USER = "admin"
DEMO_KEY_NAME = "demo (dev.py)"
# The demo key loads the samples (feeds included: a site-wide scope, granted here as the
# operator who starts the demo would with `issue_api_key`) and may triage and rank.
DEMO_SCOPES = ["sbom:write", "traces:write", "certs:write", "metrics:write", "read", "triage",
               "admin", "feeds:write"]
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
        self.argv = argv
        self.env = env
        self.log = log
        # When it was last (re)started, for children_supervise's crash-loop guard.
        self.starts: list[float] = []
        self._start()

    def _start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = self.log.open("ab")
        # A session of its own: Ctrl-C reaches only dev.py, which stops the children in order.
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=self.env, stdout=self._log_handle,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.starts.append(time.monotonic())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def restart(self) -> None:
        self.stop()
        self._start()

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


# A child that dies this many times within CRASH_LOOP_SECONDS is not started again: it
# would only fail the same way, and the demo stops, showing why.
CRASH_LOOP_RESTARTS = 5
CRASH_LOOP_SECONDS = 60.0


def children_supervise(children: list[Child]) -> None:
    """Restart every child that exited (the demo keeps serving, and the worker's jobs are
    picked up again: they are rows, re-queued by the sweep); raise RuntimeError for one that
    keeps dying."""
    for child in children:
        if child.alive():
            continue
        code = child.proc.returncode
        recent = [at for at in child.starts if time.monotonic() - at < CRASH_LOOP_SECONDS]
        if len(recent) > CRASH_LOOP_RESTARTS:
            raise RuntimeError(
                f"{child.name} stopped unexpectedly (exit code {code}) "
                f"{len(recent)} times within {CRASH_LOOP_SECONDS:.0f} s; not restarting it:\n"
                f"{child.log_tail()}"
            )
        say(f"{child.name} stopped unexpectedly (exit code {code}); restarting it "
            f"(its log: {child.log})")
        child.restart()


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
    # Links in webhooks, Jira issues and e-mails point at the demo's own port.
    env.setdefault("TRUSTRANK_SITE_URL", f"http://127.0.0.1:{env.get('PORT') or 8000}")
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
    """The demo team, its admin (a new random password each run) and the team's demo API
    key, kept across restarts (its secret in var/demo_api_key, readable by its owner only)
    so a pipeline configured with it keeps working."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from trustrank.accounts.models import ApiKey, Role
    from trustrank.accounts.services import (
        api_key_authenticate,
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
        key_file = var_dir() / "demo_api_key"
        kept = key_file.read_text().strip() if key_file.is_file() else ""
        current = api_key_authenticate(secret=kept) if kept else None
        if (
            current is not None
            and current.team_id == team.pk
            and set(DEMO_SCOPES) <= set(current.scopes)
        ):
            return password, kept
        # No usable stored key (first start, or it was revoked): retire demo keys nobody can
        # use any more and issue one.
        for old in ApiKey.objects.filter(team=team, name=DEMO_KEY_NAME, revoked_at__isnull=True):
            api_key_revoke(api_key=old)
        key = api_key_issue(
            team=team, name=DEMO_KEY_NAME, scopes=DEMO_SCOPES, created_by=user,
            allow_site_scopes=True,
        )
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_text(key.secret + "\n")
        key_file.chmod(0o600)
    return password, key.secret


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
        from django.db import connections

        password, key = demo_accounts()
        connections.close_all()

        base_url = f"http://127.0.0.1:{port}"
        queues = f"{settings.INGEST_HIGH_QUEUE},{settings.INGEST_QUEUE},{settings.BATCH_QUEUE}"
        say(f"starting gunicorn on {base_url} and a Celery worker on {queues} (logs in {log_dir})")
        children.append(Child(
            name="gunicorn",
            argv=[sys.executable, "-m", "gunicorn", "trustrank.wsgi:application",
                  "--bind", f"127.0.0.1:{port}", "--workers", env.get("WEB_CONCURRENCY", "2"),
                  # Threads: a request held by the build gate's `wait` takes a thread, not
                  # a whole worker (and the worker timeout does not cut it short).
                  "--threads", "4", "--timeout", "120", "--access-logfile", "-"],
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

        # The samples go in through the public API, as a pipeline or collector would send
        # them; the key travels in the environment, not on the command line.
        result = subprocess.run(
            [sys.executable, "manage.py", "demo_load", "--url", base_url],
            cwd=ROOT, env={**env, "TRUSTRANK_DEMO_API_KEY": key}, check=False,
        )
        if result.returncode != 0:
            say(f"loading the samples did not finish (exit code {result.returncode})")

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
            children_supervise(children)
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
