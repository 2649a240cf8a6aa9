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

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.demo_client import Api, messages_to
from ingest.demo_samples import ROOT, SampleLoader, database_identity
from ingest.demo_stories import gpu_cluster_load, shop_load


class Command(BaseCommand):
    help = "Load the demo's sample data into a running TrustRank through its HTTP API."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server")
        parser.add_argument(
            "--key", default="", help="API key (default: $TRUSTRANK_DEMO_API_KEY)"
        )
        parser.add_argument("--data", default=str(ROOT / "tests" / "data"), help="sample folder")

    def handle(self, *args: Any, **options: Any) -> None:
        key = options["key"] or os.environ.get("TRUSTRANK_DEMO_API_KEY", "")
        if not key:
            raise CommandError("give the API key with --key or TRUSTRANK_DEMO_API_KEY")

        def write(message: str) -> None:
            self.stdout.write(message)
            self.stdout.flush()

        messages_to(write)
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
        gpu_cluster_load(loader)
        shop_load(loader)
        if loader.stalled:
            raise CommandError("the worker stopped finishing jobs; see var/log/worker.log")
