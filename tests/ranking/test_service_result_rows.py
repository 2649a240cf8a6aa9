"""A run's per-service results are a row per service (`ServiceResultRow`), shared by the runs
that found the same: a page reads its own services' rows, a filter by exposure an index,
and the sets stored as one document before are split into rows by the migration."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.ranking.scenario import build
from tests.ranking.test_ranking_runs import rerank
from trustrank.ranking import selectors
from trustrank.ranking.models import ServiceResultRow, ServiceResults
from trustrank.ranking.services import runs
from trustrank.ranking.services.store_services import services_store


@pytest.mark.django_db
def test_a_run_stores_a_row_per_service_with_its_exposure(team):
    build(team)
    run = rerank(team)
    result = runs._PREVIOUS[team.pk].result
    rows = ServiceResultRow.objects.filter(digest=run.services_digest)
    assert sorted(rows.values_list("environment", "name")) == sorted(
        (s.environment, s.name) for s in result.services)
    for row in rows:
        assert row.exposure == row.data["exposure"]
        assert row.data == run.services[row.environment][row.name]
    assert rows.get(environment="prod", name="etcd").exposure == "small"
    assert rows.get(environment="prod", name="payment-gateway").exposure == "open"


@pytest.mark.django_db
def test_storing_a_set_again_writes_nothing_and_keeps_its_rows(team):
    """A second store of the same results (another run, or a run beside this one that
    found the same) finds the set's header and writes no row: its rows are the first's."""
    build(team)
    run = rerank(team)
    result = runs._PREVIOUS[team.pk].result
    before = sorted(ServiceResultRow.objects.values_list("digest", "environment", "name",
                                                         "exposure"))
    assert services_store(result) == run.services_digest
    assert sorted(ServiceResultRow.objects.values_list(
        "digest", "environment", "name", "exposure")) == before
    assert ServiceResults.objects.count() == 1


@pytest.mark.django_db
def test_the_page_reader_tells_an_environment_without_services_from_no_match(team):
    build(team)
    rerank(team)
    named = selectors.service_results_named(team_id=team.pk, environment="prod",
                                            names=["etcd", "nothing-here"])
    assert named is not None and set(named) == {"etcd"}
    assert named["etcd"]["exposure"] == "small"
    assert selectors.service_results_named(team_id=team.pk, environment="prod",
                                           names=["nothing-here"]) == {}
    assert selectors.service_results_named(team_id=team.pk, environment="staging",
                                           names=["etcd"]) is None
    assert selectors.service_result(team_id=team.pk, environment="prod",
                                    service="etcd")["exposure"] == "small"
    assert selectors.service_result(team_id=team.pk, environment="prod",
                                    service="nothing-here") is None


def _migrate(target: tuple[str, str]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return MigrationExecutor(connection).loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_splits_stored_documents_into_rows_and_back():
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("ranking")[0]
    document = {
        "prod": {
            "etcd": {"trust": 0.5, "identity_trust": None, "exposure": "small",
                     "exposure_reason": "localhost", "path": [], "hops": []},
            "web": {"trust": 1.0, "identity_trust": 0.9, "exposure": "open",
                    "exposure_reason": "ingress", "path": ["internet", "web"],
                    "hops": [{"target": "web"}]},
        },
        "staging": {"edge": {"trust": None, "identity_trust": None, "exposure": "unknown",
                             "exposure_reason": "", "path": [], "hops": []}},
    }
    try:
        old = _migrate(("ranking", "0013_rankedfinding_partitions"))
        old.get_model("ranking", "ServiceResults").objects.create(digest="d" * 64,
                                                                   data=document)
        _migrate(latest)
        rows = {(r.environment, r.name): r
                for r in ServiceResultRow.objects.filter(digest="d" * 64)}
        assert set(rows) == {("prod", "etcd"), ("prod", "web"), ("staging", "edge")}
        assert rows[("prod", "web")].exposure == "open"
        assert rows[("prod", "web")].data == document["prod"]["web"]
        assert rows[("staging", "edge")].exposure == "unknown"
        old = _migrate(("ranking", "0013_rankedfinding_partitions"))
        back = old.get_model("ranking", "ServiceResults").objects.get(digest="d" * 64)
        assert back.data == document
    finally:
        _migrate(latest)
        ServiceResults.objects.filter(digest="d" * 64).delete()
        ServiceResultRow.objects.filter(digest="d" * 64).delete()
