"""The services list of an environment, for the page and the API: the traced services, then
the services a deployment declares that send no traces (no Service row: an SBOM upload
naming its environment and service, or the deployment PUT).

Both parts are querysets filtered by the same parameters; `ServiceListing` pages over them
as one list (a count each, a slice each), and `service_rows` reads what a page of rows
needs in a fixed number of queries, whatever its length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from django.db.models import Exists, OuterRef, QuerySet

from trustrank.cluster.selectors import entry_points_by_team
from trustrank.runtime import selectors
from trustrank.runtime.ingress_state import ingress_state
from trustrank.runtime.models import Deployment, Environment, NodeKind, Service

Results = dict[int, dict[str, dict[str, Any]]]


def declared_untraced_for_environments(
    *, environments: Iterable[Environment]
) -> QuerySet[Deployment]:
    """Deployments of services with no Service row of their name (the ranking keys services
    by environment and name): declared, never traced."""
    traced = Service.objects.filter(
        environment_id=OuterRef("environment_id"), kind=NodeKind.SERVICE,
        name=OuterRef("service_name"),
    )
    return (
        Deployment.objects.filter(environment__in=list(environments))
        .exclude(Exists(traced))
        .select_related("environment__team", "project_version__project")
        .order_by("service_name", "namespace", "id")
    )


class ServiceListing:
    """Traced services, then declared untraced ones, as one list a paginator slices (it
    needs `count()` and slices only)."""

    def __init__(self, traced: QuerySet[Service], declared: QuerySet[Deployment]) -> None:
        self.traced, self.declared = traced, declared
        self._traced_count: int | None = None
        self._count: int | None = None

    def count(self) -> int:
        if self._count is None:
            self._traced_count = self.traced.count()
            self._count = self._traced_count + self.declared.count()
        return self._count

    def declared_count(self) -> int:
        """How many of the rows are declared untraced services."""
        total = self.count()
        return total - (self._traced_count or 0)

    def __len__(self) -> int:
        return self.count()

    @overload
    def __getitem__(self, index: int) -> Service | Deployment: ...
    @overload
    def __getitem__(self, index: slice) -> list[Service | Deployment]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int):
            return self[index:index + 1][0]
        self.count()
        assert self._traced_count is not None and index.step is None
        start, stop = index.start or 0, index.stop if index.stop is not None else len(self)
        split = self._traced_count
        rows: list[Service | Deployment] = []
        if start < split:
            rows += list(self.traced[start:min(stop, split)])
        if stop > split:
            rows += list(self.declared[max(start - split, 0):stop - split])
        return rows


@dataclass
class ServiceRow:
    """One row of the list: a traced service (`service`) or a declared one (`service`
    None), with its deployment, call rates, libraries, ranking result and ingress state."""

    service: Service | None
    deployment: Deployment | None
    environment: Environment
    rates: selectors.ServiceRates
    ingress: dict[str, Any]
    result: dict[str, Any] = field(default_factory=dict)
    libraries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def traced(self) -> bool:
        return self.service is not None

    @property
    def name(self) -> str:
        if self.service is not None:
            return self.service.name
        assert self.deployment is not None
        return self.deployment.service_name

    @property
    def exposure(self) -> str | None:
        """The latest run's SSVC exposure; a declared service without one is unknown."""
        return self.result.get("exposure") or (None if self.traced else "unknown")


def service_rows(
    *, page: Iterable[Service | Deployment], since: datetime | None, results: Results,
    with_libraries: bool = True,
) -> list[ServiceRow]:
    """Rows for a page of `ServiceListing`; `results` holds the latest ranking run's entry
    per environment id and service name. The page's table shows no libraries
    (`with_libraries` False saves their query)."""
    page = list(page)
    traced = [s for s in page if isinstance(s, Service)]
    ids = [s.pk for s in traced]
    rates = selectors.service_rates(service_ids=ids, since=since)
    libraries = (selectors.service_libraries(service_ids=ids, since=since)
                 if with_libraries else {})
    deployments = selectors.deployments_for_services(services=traced)
    entries = entry_points_by_team({item.environment.team_id for item in page})
    rows = []
    for item in page:
        env = item.environment
        if isinstance(item, Service):
            service, deployment = item, deployments.get(item.pk)
            if deployment is not None:
                deployment.environment = env
        else:
            service, deployment = None, item
        row = ServiceRow(
            service=service, deployment=deployment, environment=env,
            rates=rates[service.pk] if service is not None else selectors.ServiceRates(),
            ingress=ingress_state(service=service, declared=deployment,
                                  entries=entries[env.team_id]),
            libraries=libraries.get(service.pk, []) if service is not None else [],
        )
        row.result = results.get(env.pk, {}).get(row.name) or {}
        rows.append(row)
    return rows
