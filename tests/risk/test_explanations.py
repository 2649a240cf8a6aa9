"""How the explanation words rates and deployments: the window named, the last hour and
the peak where per-minute buckets exist, the deployment by name and source."""

from __future__ import annotations

from dataclasses import replace

from tests.risk.seed import ENV, LOG4J, seed_inputs
from trustrank.risk import rank
from trustrank.risk.factors import rate_text, window_text
from trustrank.risk.inputs import CallEdge, Deployment, ObservedComponent, RankSettings
from trustrank.risk.libraries import observed_components
from trustrank.risk.results import canonical_json


def _factors(inputs, settings=None):
    result = rank(inputs=inputs, settings=settings or RankSettings())
    first = result.findings[0]
    assert first.finding_id == "log4shell"
    return {f.name: f for f in first.explanation}


def test_window_text():
    assert window_text(1440) == "24 h"
    assert window_text(60) == "1 h"
    assert window_text(10080) == "7 d"
    assert window_text(90) == "90 min"


def test_rate_text_with_and_without_buckets():
    assert rate_text(per_minute=120, recent=192, peak=606, window_minutes=1440) == (
        "3.2/s (last hour; peak 10.1/s over 24 h)")
    assert rate_text(per_minute=30, recent=None, peak=None, window_minutes=1440) == (
        "30/min (average over 24 h)")
    assert rate_text(per_minute=0.05, recent=None, peak=None, window_minutes=10080) == (
        "3/h (average over 7 d)")
    # Quiet in the last hour, busy earlier: both numbers, one unit.
    assert rate_text(per_minute=2, recent=0, peak=600, window_minutes=1440) == (
        "0/s (last hour; peak 10/s over 24 h)")
    # A window shorter than the hour: the average only.
    assert rate_text(per_minute=6, recent=6, peak=9, window_minutes=30) == (
        "6/min (average over 30 min)")


def _with_rates(inputs):
    libraries = tuple(
        replace(lib, observed=tuple(
            replace(o, recent_calls_per_minute=192.0, peak_calls_per_minute=606.0)
            for o in lib.observed))
        for lib in inputs.libraries
    )
    edges = tuple(
        replace(e, recent_calls_per_minute=e.calls_per_minute * 2,
                peak_calls_per_minute=e.calls_per_minute * 5)
        for e in inputs.edges
    )
    return replace(inputs, libraries=libraries, edges=edges)


def test_reachability_and_path_give_the_last_hour_and_the_peak():
    factors = _factors(_with_rates(seed_inputs()))
    assert factors["reachability"].source == (
        "scope io.opentelemetry.log4j-context-data-2.17 on prod/payment-gateway, "
        "called 3.2/s (last hour; peak 10.1/s over 24 h)")
    assert ("frontend → payment-gateway: called 20/s (last hour; peak 50/s over 24 h), "
            "mTLS 100%") in factors["exposure"].source


def test_the_window_named_is_the_settings_window():
    factors = _factors(_with_rates(seed_inputs()), RankSettings(window_minutes=10080))
    assert "peak 10.1/s over 7 d" in factors["reachability"].source


def test_human_impact_names_the_deployment_by_project_version_and_source():
    inputs = seed_inputs()
    deployments = tuple(
        replace(d, project_version_name="payment-gateway@1.4.2", source="sbom upload")
        if d.service == "payment-gateway" else d
        for d in inputs.deployments
    )
    factors = _factors(replace(inputs, deployments=deployments))
    assert factors["human_impact"].source == (
        "deployment prod/payment-gateway → payment-gateway@1.4.2 (source: sbom upload)")
    assert "gateway@1.4 " not in factors["human_impact"].source
    # Without a name the key stands in.
    plain = _factors(seed_inputs())["human_impact"].source
    assert plain == "deployment prod/payment-gateway → gateway@1.4 (source: sbom)"


def test_rates_and_names_keep_results_byte_identical():
    inputs = _with_rates(seed_inputs())
    inputs = replace(inputs, deployments=(
        *inputs.deployments,
        Deployment(environment=ENV, service="x", project_version="x@1",
                   project_version_name="x@1.0", source="page"),
    ), edges=(*inputs.edges, CallEdge(environment=ENV, caller="frontend", callee="orders",
                                      calls_per_minute=1, recent_calls_per_minute=0.5,
                                      peak_calls_per_minute=3)))
    shuffled = replace(inputs, edges=inputs.edges[::-1], deployments=inputs.deployments[::-1],
                       libraries=inputs.libraries[::-1])
    assert canonical_json(rank(inputs=inputs)) == canonical_json(rank(inputs=shuffled))


def test_observed_components_add_recent_and_peak_rates_per_key():
    out = observed_components(evidence=[
        ("java_frame", "org.apache.logging.log4j.core.Logger.log", 1.0, 2.0, 5.0),
        ("scope", "io.opentelemetry.log4j-context-data-2.17", 10.0, 12.0, 30.0),
    ])
    by = {o.component_key: o for o in out}
    log4j = by[LOG4J]
    assert (log4j.calls_per_minute, log4j.recent_calls_per_minute,
            log4j.peak_calls_per_minute) == (11.0, 14.0, 35.0)
    assert log4j.evidence == "scope io.opentelemetry.log4j-context-data-2.17"
    # One row without bucket rates: the sums are not known, only the average.
    mixed = observed_components(evidence=[
        ("java_frame", "org.apache.logging.log4j.core.Logger.log", 1.0, 2.0, 5.0),
        ("scope", "io.opentelemetry.log4j-context-data-2.17", 10.0),
    ])
    got = {o.component_key: o for o in mixed}[LOG4J]
    assert (got.recent_calls_per_minute, got.peak_calls_per_minute) == (None, None)
    assert isinstance(got, ObservedComponent)


def test_a_component_observed_from_a_stack_frame_alone_names_the_frame():
    inputs = seed_inputs()
    frames = observed_components(evidence=[
        ("java_frame", "org.apache.logging.log4j.core.Logger.log", 0.5, 1.0, 4.0),
    ])
    libraries = tuple(
        replace(lib, observed=frames) if lib.service == "payment-gateway" else lib
        for lib in inputs.libraries
    )
    factors = _factors(replace(inputs, libraries=libraries))
    assert factors["reachability"].value == "observed"
    assert factors["reachability"].source.startswith(
        "exception frame org.apache.logging.log4j.core.Logger.log on prod/payment-gateway, "
        "called ")
