"""Kubernetes Services (LoadBalancer, NodePort), Ingresses and Gateway API HTTPRoutes from
`POST /api/v1/clusters/<c>/objects` make the traced services they reach entry points, with
the route in the exposure explanation; a ClusterIP Service does not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.cluster import k8s_build as k8s
from tests.cluster.test_receivers_storage import run_jobs
from tests.ranking.scenario import build
from tests.ranking.test_ranking_runs import rerank
from trustrank.cluster.models import ClusterEntryPoint, ClusterNetworkObject
from trustrank.findings.models import Finding
from trustrank.findings.records import EvidenceChange
from trustrank.parsers.kubernetes import KubernetesError, kubernetes_parse
from trustrank.runtime.models import Service

pytestmark = pytest.mark.django_db


def service(name: str, *, type_: str = "ClusterIP", selector: dict[str, str] | None = None,
            namespace: str = "shop") -> dict[str, Any]:
    """Shaped as `kubectl get svc -o json` prints one (API reference, core/v1 Service)."""
    spec: dict[str, Any] = {
        "type": type_, "selector": selector or {"app": name},
        "clusterIP": "10.96.12.34", "clusterIPs": ["10.96.12.34"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
    }
    status: dict[str, Any] = {"loadBalancer": {}}
    if type_ in ("NodePort", "LoadBalancer"):
        spec["ports"][0]["nodePort"] = 31080
        spec["externalTrafficPolicy"] = "Cluster"
    if type_ == "LoadBalancer":
        status = {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP"}]}}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "uid": f"svc-{name}",
                         "resourceVersion": "1234", "labels": {"app": name}},
            "spec": spec, "status": status}


def ingress(name: str, *, host: str, backend: str, namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace, "uid": f"ing-{name}"},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": host, "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": backend, "port": {"number": 80}}}}]}}]},
        "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}},
    }


def gateway(name: str, *, namespace: str = "infra") -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": "istio", "listeners": [
            {"name": "https", "hostname": "*.example.com", "port": 443, "protocol": "HTTPS"}]},
        "status": {"addresses": [{"type": "IPAddress", "value": "198.51.100.7"}]},
    }


def http_route(name: str, *, backend: str, namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "public", "namespace": "infra"}],
            "hostnames": ["api.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/pay"}}],
                       "backendRefs": [{"name": backend, "port": 8080}]}],
        },
    }


def app_pod(name: str, app: str) -> dict[str, Any]:
    return k8s.pod(name, namespace="shop", owner=("ReplicaSet", f"{app}-7d9f8b6c5d"),
                   labels={"app.kubernetes.io/name": app, "app": app,
                           "pod-template-hash": "7d9f8b6c5d"}, gpus=None)


def upload(api, team, *items: dict[str, Any], cluster: str = "c1") -> None:
    r = api(team, "metrics:write").post(f"/api/v1/clusters/{cluster}/objects",
                                        data=k8s.listing(*items),
                                        content_type="application/json")
    assert r.status_code == 202, r.content
    run_jobs()


def test_the_parser_reads_routing_objects():
    snapshot = kubernetes_parse(body=k8s.listing(
        service("web", type_="LoadBalancer"), ingress("shop", host="example.com", backend="web"),
        gateway("public"), http_route("pay", backend="payment-gateway"),
    ))
    [svc] = snapshot.services
    assert (svc.type, svc.selector, svc.node_ports, svc.external) == (
        "LoadBalancer", {"app": "web"}, (31080,), ("203.0.113.10",))
    [backend] = snapshot.ingresses[0].backends
    assert (backend.host, backend.service, backend.port) == ("example.com", "web", "80")
    assert snapshot.gateways[0].listeners == ("https:443 *.example.com",)
    route = snapshot.http_routes[0]
    assert route.parents == (("infra", "public"),)
    assert route.backends[0].service == "payment-gateway"
    bad = service("web")
    bad["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(KubernetesError, match=r"Service shop/web: spec\.ports"):
        kubernetes_parse(body=orjson.dumps(bad))


def test_a_load_balancer_service_makes_the_mapped_service_open(team, api):
    build(team)
    rerank(team)
    assert Finding.objects.get(cve_id="CVE-2020-15115").rank_context.data["exposure"] == "small"
    EvidenceChange.objects.all().delete()
    # The LoadBalancer selects etcd's pods, labelled with the name its traces report.
    upload(api, team, service("etcd-lb", type_="LoadBalancer", selector={"app": "etcd"}),
           app_pod("etcd-7d9f8b6c5d-x1", "etcd"))
    [entry] = ClusterEntryPoint.objects.filter(cluster__team=team)
    assert "etcd" in entry.names and entry.kind == "Service"
    assert EvidenceChange.objects.filter(team=team, what__contains="entry points").exists()
    run = rerank(team)
    assert run.services["prod"]["etcd"]["exposure"] == "open"
    factor = next(f for f in Finding.objects.get(cve_id="CVE-2020-15115")
                  .rank_context.data["explanation"] if f["name"] == "exposure")
    assert factor["value"] == "open"
    assert factor["source"] == (
        "ingress path internet → etcd: internet → etcd: Kubernetes Service shop/etcd-lb type "
        "LoadBalancer at 203.0.113.10, node ports 31080 (cluster c1)")


def test_cluster_ip_is_not_an_entry_point_but_an_ingress_to_it_is(team, api):
    build(team)
    upload(api, team, service("etcd", selector={"app": "etcd"}),
           app_pod("etcd-7d9f8b6c5d-x1", "etcd"))
    assert not ClusterEntryPoint.objects.exists()
    assert rerank(team).services["prod"]["etcd"]["exposure"] == "small"
    # An Ingress alone (the Service stored before) makes it reachable, host and all.
    upload(api, team, ingress("web", host="example.com", backend="etcd"))
    assert ClusterNetworkObject.objects.filter(kind="Service").count() == 1
    run = rerank(team)
    assert run.services["prod"]["etcd"]["exposure"] == "open"
    hop = run.services["prod"]["etcd"]["hops"][0]
    assert hop["detail"] == ("Ingress shop/web host example.com → Service etcd at "
                             "lb.example.net (cluster c1)")
    api_state = api(team, "read").get("/api/v1/environments/prod/services/etcd/ingress").json()
    assert (api_state["ingress"], api_state["source"]) == (True, "kubernetes")
    assert api_state["evidence"] == [hop["detail"]]


def test_node_port_and_http_route_are_entry_points(team, api):
    build(team)
    now = Service.objects.get(name="etcd").first_seen
    Service.objects.create(environment=Service.objects.get(name="etcd").environment,
                           name="cart", first_seen=now, last_seen=now)
    upload(api, team, service("cart", type_="NodePort"), app_pod("cart-7d9f8b6c5d-a", "cart"),
           gateway("public"), http_route("pay", backend="etcd"))
    routes = dict(ClusterEntryPoint.objects.values_list("kind", "route"))
    assert routes["Service"] == ("Kubernetes Service shop/cart type NodePort, node ports 31080 "
                                 "(cluster c1)")
    assert routes["HTTPRoute"] == (
        "HTTPRoute shop/pay via Gateway infra/public (istio) at 198.51.100.7 host "
        "api.example.com/pay → Service etcd (cluster c1)")
    run = rerank(team)
    assert run.services["prod"]["cart"]["exposure"] == "open"
    assert run.services["prod"]["etcd"]["exposure"] == "open"
    # A later snapshot's Services are the whole list: the NodePort gone, cart is not open.
    upload(api, team, service("cart"))
    assert rerank(team).services["prod"]["cart"]["exposure"] == "small"


def test_a_service_in_another_cluster_is_not_matched(team, api):
    build(team)
    etcd = Service.objects.get(name="etcd")
    etcd.attributes = {"k8s.cluster.name": "c2"}
    etcd.save()
    upload(api, team, service("etcd", type_="LoadBalancer"), app_pod("etcd-1", "etcd"))
    assert rerank(team).services["prod"]["etcd"]["exposure"] == "small"


def test_a_load_balancer_makes_a_declared_untraced_service_open(team, api):
    """A service a deployment declares that sends no traces: a LoadBalancer selecting its
    pods makes it open (the route names it in any cluster: no resource attributes say
    where it runs); the operator's false still wins."""
    from tests.ranking.test_untraced_services import _declare_by_sbom

    build(team)
    _declare_by_sbom(api(team, "sbom:write"), team, project="etcd-edge", environment="staging",
                     service="etcd-edge", human_impact="medium")
    assert rerank(team).services["staging"]["etcd-edge"]["exposure"] == "unknown"
    upload(api, team, service("edge-lb", type_="LoadBalancer", selector={"app": "etcd-edge"}),
           app_pod("etcd-edge-7d9f8b6c5d-x1", "etcd-edge"))
    run = rerank(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] == "open"
    finding = Finding.objects.get(cve_id="CVE-2020-15115", project__name="etcd-edge")
    factor = next(f for f in finding.rank_context.data["explanation"]
                  if f["name"] == "exposure")
    assert factor["source"] == (
        "ingress path internet → etcd-edge: internet → etcd-edge: Kubernetes Service "
        "shop/edge-lb type LoadBalancer at 203.0.113.10, node ports 31080 (cluster c1)")
    assert not Service.objects.filter(name="etcd-edge").exists()
    url = "/api/v1/environments/staging/services/etcd-edge/ingress"
    state = api(team, "read").get(url).json()
    assert (state["traced"], state["ingress"], state["source"]) == (False, True, "kubernetes")
    # The operator's "not an entry point" wins over the route: controlled (no traces).
    assert api(team, "triage").put(url, {"ingress": False}, format="json").status_code == 200
    assert rerank(team).services["staging"]["etcd-edge"]["exposure"] == "controlled"
