"""Loads schedule one debounced ranking run per team."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.identity.pki import make_pki
from tests.identity.test_services import upload
from tests.vulns.helpers import bom, load_sbom
from trustrank.ranking.models import RankingRun

pytestmark = pytest.mark.django_db


def test_loads_share_one_debounced_run(team, other_team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    before = timezone.now()
    upload(team, make_pki().leaf("/svc").pem)  # a certificate job
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))  # then matching
    runs = list(RankingRun.objects.filter(team=team))
    assert len(runs) == 1 and runs[0].status == "queued"
    assert runs[0].not_before >= before + timedelta(seconds=59)
    assert not RankingRun.objects.filter(team=other_team).exists()


def test_run_that_is_not_due_waits(team, settings):
    from trustrank.ranking.services.requests import ranking_run_request
    from trustrank.ranking.services.runs import ranking_run_execute

    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=3600)
    assert ranking_run_execute(run_id=run.pk) == "waiting"
    run.refresh_from_db()
    assert run.status == "queued"
    # Asking for a run now brings the waiting one forward instead of adding another.
    again = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert again.pk == run.pk and ranking_run_execute(run_id=run.pk) == "done"
    assert ranking_run_execute(run_id=run.pk) == "finished before"  # twice: runs once
