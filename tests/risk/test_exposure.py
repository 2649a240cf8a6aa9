from __future__ import annotations

from trustrank.risk import CallEdge, ExternalPeer, RootSpanOrigin, Service
from trustrank.risk.graph import analyse_environment, environment_graph


def _analyse(services, edges=(), origins=(), peers=()):
    return analyse_environment(environment="e", services=services, edges=edges, peers=peers,
                               origins=origins).services


def _svc(name, **kw):
    return Service(environment="e", name=name, **kw)


def _edge(a, b, **kw):
    return CallEdge(environment="e", caller=a, callee=b, **kw)


def _origin(service, cls, spans=10, address=""):
    return RootSpanOrigin(environment="e", service=service, address_class=cls, spans=spans,
                          example_address=address)


def test_open_controlled_small():
    s = _analyse(
        [_svc("web"), _svc("api"), _svc("batch"), _svc("cache"), _svc("etcd"), _svc("idle")],
        edges=[_edge("web", "api", calls_per_minute=100, mtls_share=0.5, sig=60),
               _edge("batch", "cache", calls_per_minute=5)],
        origins=[_origin("web", "internet", address="198.51.100.4"),
                 _origin("batch", "internal"), _origin("etcd", "local")],
    )
    assert {n: c.exposure for n, c in s.items()} == {
        "web": "open", "api": "open", "batch": "controlled", "cache": "controlled",
        "etcd": "small", "idle": "small",
    }
    assert s["api"].path == ("internet", "web", "api")
    first, second = s["api"].hops
    assert (first.source, first.target, first.via) == (
        "internet", "web", "root spans from internet addresses")
    assert (second.via, second.calls_per_minute, second.mtls_share, second.sig) == (
        "calls", 100, 0.5, 60)
    assert s["etcd"].path == () and "local" in s["etcd"].exposure_reason


def test_operator_override_wins_both_ways():
    s = _analyse(
        [_svc("public", ingress_override=False), _svc("hidden", ingress_override=True),
         _svc("behind")],
        edges=[_edge("public", "behind")],
        origins=[_origin("public", "internet", spans=9000)],
    )
    assert s["public"].exposure == "controlled"
    assert "operator" in s["public"].exposure_reason
    assert s["behind"].exposure == "controlled"
    assert s["hidden"].exposure == "open"
    assert s["hidden"].hops[0].via == "operator override"


def test_ingress_candidate_and_internet_peers_are_entry_points():
    s = _analyse(
        [_svc("lb", ingress_candidate=True), _svc("hook"), _svc("worker")],
        edges=[_edge("stripe", "hook", calls_per_minute=2), _edge("queue", "worker")],
        peers=[ExternalPeer(environment="e", name="stripe"),
               ExternalPeer(environment="e", name="queue", address_class="internal")],
    )
    assert s["lb"].exposure == "open" and s["lb"].hops[0].via == "ingress candidate"
    assert s["hook"].exposure == "open" and s["hook"].hops[0].detail == "calls from external peer stripe"
    assert s["worker"].exposure == "controlled"


def test_shortest_path_is_kept_and_ties_resolve_by_name():
    s = _analyse(
        [_svc("a"), _svc("b"), _svc("c"), _svc("d")],
        edges=[_edge("a", "c"), _edge("b", "c"), _edge("c", "d"), _edge("a", "d")],
        origins=[_origin("a", "internet"), _origin("b", "internet")],
    )
    assert s["c"].path == ("internet", "a", "c")
    assert s["d"].path == ("internet", "a", "d")


def test_graph_has_internet_identities_and_deployed_components():
    from trustrank.risk import Component, Deployment

    g = environment_graph(
        services=[_svc("web", identity_strength=90, identity="spiffe://t/web")],
        edges=[], peers=[ExternalPeer(environment="e", name="cdn")],
        origins=[_origin("web", "internet")],
        deployments=[Deployment(environment="e", service="web", project_version="web@1")],
        components=[Component(project_version="web@1", key="pkg:pypi/django")],
    )
    assert g.has_edge(("internet",), ("service", "web"))
    assert g.has_edge(("identity", "spiffe://t/web"), ("service", "web"))
    assert g.has_edge(("service", "web"), ("version", "web@1"))
    assert g.has_edge(("version", "web@1"), ("component", "web@1", "pkg:pypi/django"))
    assert g.has_edge(("internet",), ("peer", "cdn"))


def test_services_named_only_by_call_edges_are_part_of_the_graph():
    s = _analyse([_svc("web")], edges=[_edge("web", "ghost"), _edge("ghost", "db")],
                 origins=[_origin("web", "internet")])
    assert s["ghost"].exposure == "open"
    assert s["db"].path == ("internet", "web", "ghost", "db")


def test_the_entry_hop_names_the_route():
    s = _analyse(
        [_svc("web"), _svc("api"),
         _svc("lb", ingress_candidate=True,
              ingress_detail="Kubernetes Service shop/lb type LoadBalancer (cluster c1)"),
         _svc("marked", ingress_override=True,
              ingress_detail="operator marked ingress via API by key ci at 2026-12-04 14:00 UTC"),
         _svc("denied", ingress_override=False,
              ingress_detail="operator marked not an entry point via API by alice")],
        edges=[_edge("web", "api", calls_per_minute=3)],
        origins=[_origin("web", "internet", spans=7, address="203.0.113.7"),
                 _origin("denied", "internet", spans=5)],
    )
    assert s["web"].hops[0].detail == (
        "root span from public client 203.0.113.7 (7 root spans from internet addresses)")
    assert s["api"].path == ("internet", "web", "api")
    assert s["lb"].hops[0].detail.startswith("Kubernetes Service shop/lb")
    assert s["marked"].hops[0].detail.startswith("operator marked ingress via API by key ci")
    assert s["denied"].exposure == "controlled"
    assert s["denied"].exposure_reason == (
        "called only from inside the network "
        "(operator marked not an entry point via API by alice)")
