from __future__ import annotations

import pytest

from trustrank.risk.libraries import (
    component_key_from_purl,
    component_matches,
    library_map,
    map_code_namespace,
    map_evidence,
    map_frame,
    map_scope,
    map_stacktrace,
    observed_components,
)

LOG4J = "pkg:maven/org.apache.logging.log4j/log4j-core"


def _keys(matches):
    return [m.component_key for m in matches]


@pytest.mark.parametrize(
    ("scope", "keys"),
    [
        ("io.opentelemetry.log4j-context-data-2.17", [LOG4J]),
        ("io.opentelemetry.log4j-appender-2.17", [LOG4J]),
        ("io.opentelemetry.spring-webmvc-6.0", ["pkg:maven/org.springframework/spring-webmvc"]),
        ("io.opentelemetry.okhttp-3.0", ["pkg:maven/com.squareup.okhttp3/okhttp"]),
        ("io.opentelemetry.jdbc", []),
        ("io.opentelemetry.unknown-lib-1.0", []),
        ("opentelemetry.instrumentation.requests", ["pkg:pypi/requests"]),
        ("opentelemetry.instrumentation.psycopg2",
         ["pkg:pypi/psycopg2", "pkg:pypi/psycopg2-binary"]),
        ("opentelemetry.instrumentation.aiohttp_client", ["pkg:pypi/aiohttp"]),
        ("opentelemetry.instrumentation.flask", ["pkg:pypi/flask"]),
        ("opentelemetry.instrumentation.logging", []),
        ("@opentelemetry/instrumentation-express", ["pkg:npm/express"]),
        ("@opentelemetry/instrumentation-http", []),
        ("@opentelemetry/instrumentation-nestjs-core", ["pkg:npm/%40nestjs/core"]),
        ("my.company.tracer", []),
    ],
)
def test_instrumentation_scopes(scope, keys):
    assert _keys(map_scope(name=scope)) == keys


@pytest.mark.parametrize(
    ("namespace", "keys"),
    [
        ("org.apache.logging.log4j.core.Logger", [LOG4J]),
        ("org.apache.logging.log4j.spi.AbstractLogger",
         ["pkg:maven/org.apache.logging.log4j/log4j-api"]),
        ("com.fasterxml.jackson.databind.ObjectMapper",
         ["pkg:maven/com.fasterxml.jackson.core/jackson-databind"]),
        ("com.shop.payments.Handler", []),
        ("java.util.concurrent.ThreadPoolExecutor", []),
        ("requests.sessions", ["pkg:pypi/requests"]),
        ("yaml.loader", ["pkg:pypi/pyyaml"]),
        ("google.protobuf.message", ["pkg:pypi/protobuf"]),
        ("json.decoder", []),
        ("Django_Filters.rest", ["pkg:pypi/django-filters"]),
    ],
)
def test_code_namespaces(namespace, keys):
    assert _keys(map_code_namespace(name=namespace)) == keys


def test_stack_frames_of_exception_events():
    java = (
        "java.lang.RuntimeException: boom\n"
        "\tat org.apache.logging.log4j.core.Logger.log(Logger.java:123)\n"
        "\tat org.apache.logging.log4j.core.Logger.logMessage(Logger.java:99)\n"
        "\tat com.shop.Payment.charge(Payment.java:10)\n"
    )
    assert _keys(map_stacktrace(text=java)) == [LOG4J]
    python = (
        'Traceback (most recent call last):\n'
        '  File "/app/.venv/lib/python3.11/site-packages/requests/sessions.py", line 589, in request\n'
        '  File "/usr/lib/python3/dist-packages/yaml/__init__.py", line 1, in load\n'
        '  File "/app/shop/views.py", line 3, in pay\n'
    )
    assert _keys(map_stacktrace(text=python)) == ["pkg:pypi/requests", "pkg:pypi/pyyaml"]
    node = "    at Layer.handle (/app/node_modules/express/lib/router/layer.js:95:5)"
    assert _keys(map_stacktrace(text=node)) == ["pkg:npm/express"]
    hit = map_evidence(kind="exception", name=java)[0]
    assert hit.evidence == "stack frame at org.apache.logging.log4j.core.Logger"


def test_system_names_map_to_nothing():
    assert map_evidence(kind="db", name="postgresql") == ()


def test_settings_override_and_extend_the_default_table():
    rules = library_map((("java_package", "com.shop.payments", "pkg:maven/com.shop/payments"),
                         ("python_scope", "requests", "")))
    assert _keys(map_code_namespace(name="com.shop.payments.Handler", rules=rules)) == [
        "pkg:maven/com.shop/payments"]
    assert map_scope(name="opentelemetry.instrumentation.requests", rules=rules) == ()
    with pytest.raises(ValueError, match="unknown library map table"):
        library_map((("nope", "x", "y"),))


def test_observed_components_sum_rates_and_name_the_busiest_evidence():
    out = observed_components(evidence=[
        ("scope", "io.opentelemetry.log4j-context-data-2.17", 600.0),
        ("code", "org.apache.logging.log4j.core.Logger", 20.0),
        ("db", "postgresql", 50.0),
    ])
    assert len(out) == 1
    assert out[0].component_key == LOG4J
    assert out[0].calls_per_minute == 620.0
    assert out[0].evidence == "scope io.opentelemetry.log4j-context-data-2.17"


def test_component_keys_and_group_matching():
    assert component_key_from_purl("pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1?type=jar"
                                   ) == LOG4J
    assert component_key_from_purl("pkg:npm/@nestjs/core@10.0.0") == "pkg:npm/%40nestjs/core"
    assert component_key_from_purl("pkg:npm/%40nestjs/core@10.0.0") == "pkg:npm/%40nestjs/core"
    assert component_matches(LOG4J, "pkg:maven/org.apache.logging.log4j")
    assert not component_matches(LOG4J, "pkg:maven/org.apache.logging")


def test_recorded_stack_frames_map_like_code_namespaces():
    from trustrank.risk.libraries import map_frame

    hit = map_evidence(kind="java_frame", name="org.apache.logging.log4j.core.Logger.log")
    assert _keys(hit) == [LOG4J]
    assert hit[0].evidence == "exception frame org.apache.logging.log4j.core.Logger.log"
    assert hit[0].confidence == "high"
    # An unlisted Java package names no Maven group; JDK packages name nothing.
    assert map_frame(kind="java_frame", name="com.shop.PaymentController.pay") == ()
    assert map_frame(kind="java_frame", name="javax.crypto.Cipher.doFinal") == ()
    assert _keys(map_frame(kind="python_frame", name="requests.sessions.request")) == [
        "pkg:pypi/requests"]
    assert _keys(map_frame(kind="python_frame", name="yaml.load")) == ["pkg:pypi/pyyaml"]
    assert _keys(map_frame(kind="js_frame", name="express/lib/router/index.js")) == [
        "pkg:npm/express"]
    assert _keys(map_frame(kind="js_frame", name="@nestjs/core/router/router-proxy.js")) == [
        "pkg:npm/%40nestjs/core"]
    # Configurable through the same tables as code.namespace.
    rules = library_map((("java_package", "com.shop", "pkg:maven/com.shop/payments"),))
    assert _keys(map_frame(kind="java_frame", name="com.shop.PaymentController.pay",
                           rules=rules)) == ["pkg:maven/com.shop/payments"]


# --- issue 24: artifacts, not groups --------------------------------------------------

BOOT_AUTOCONFIGURE = "pkg:maven/org.springframework.boot/spring-boot-autoconfigure"
H2 = "pkg:maven/com.h2database/h2"
ERROR_CONTROLLER = ("org.springframework.boot.autoconfigure.web.servlet.error."
                    "BasicErrorController")


def test_a_spring_boot_class_names_its_artifact_not_the_spring_group():
    assert _keys(map_code_namespace(name=ERROR_CONTROLLER)) == [BOOT_AUTOCONFIGURE]


def test_an_h2_jdbc_class_names_the_h2_artifact():
    assert _keys(map_code_namespace(name="org.h2.jdbc.JdbcConnection")) == [H2]
    assert _keys(map_frame(kind="java_frame", name="org.h2.jdbc.JdbcConnection.close")) == [H2]


def test_packages_the_sbom_lists_come_before_every_table():
    sbom = {"org.h2": ("pkg:maven/com.example/h2-fork",),
            "com.shop.billing": ("pkg:maven/com.shop/billing",)}
    (hit,) = map_code_namespace(name="org.h2.jdbc.JdbcConnection", sbom=sbom)
    assert hit.component_key == "pkg:maven/com.example/h2-fork"
    assert hit.evidence == ("code.namespace org.h2.jdbc.JdbcConnection "
                            "(package org.h2 listed in the SBOM)")
    assert _keys(map_frame(kind="java_frame", name="com.shop.billing.Invoice.total",
                           sbom=sbom)) == ["pkg:maven/com.shop/billing"]
    out = observed_components(evidence=[("code", "com.shop.billing.Invoice", 6.0)], sbom=sbom)
    assert [o.component_key for o in out] == ["pkg:maven/com.shop/billing"]


def test_a_table_group_never_hides_the_artifact_the_index_knows():
    # The default table lists org.springframework as a group: the index's artifact wins.
    assert _keys(map_code_namespace(name="org.springframework.core.SpringVersion")) == [
        "pkg:maven/org.springframework/spring-core"]
    # An artifact-level table entry and a deeper index entry: the same classes shipped by
    # two artifacts, both kept.
    keys = _keys(map_code_namespace(name="org.apache.catalina.connector.CoyoteAdapter"))
    assert "pkg:maven/org.apache.tomcat.embed/tomcat-embed-core" in keys
    assert any(k.startswith("pkg:maven/org.apache.tomcat/") for k in keys)


def test_the_generated_index_loads_with_the_expected_entries():
    from trustrank.risk.libraries import java_package_index

    index = java_package_index()
    assert index["org.springframework.boot.autoconfigure"] == (BOOT_AUTOCONFIGURE,)
    assert index["org.springframework.web.servlet"] == (
        "pkg:maven/org.springframework/spring-webmvc",)
    assert index["org.h2"] == (H2,)
    assert index["org.apache.logging.log4j.core"] == (LOG4J,)
    assert index["com.fasterxml.jackson.databind"] == (
        "pkg:maven/com.fasterxml.jackson.core/jackson-databind",)
    # Compact: distinctive prefixes only, none of them a bare group.
    assert 100 < len(index) < 5000
    assert "org.springframework" not in index and "org" not in index


def test_evidence_naming_only_a_group_leaves_its_artifacts_unknown():
    from trustrank.risk.factors import FactorSource
    from trustrank.risk.inputs import RankInputs, RankSettings, ServiceLibraries

    # A package of the group that neither the table nor the index knows: only the group.
    observed = observed_components(evidence=[("code", "ch.qos.logback.newthing.Widget", 5.0)])
    assert [o.component_key for o in observed] == ["pkg:maven/ch.qos.logback"]
    inputs = RankInputs(libraries=(ServiceLibraries(environment="prod", service="shop",
                                                    traced=True, observed=observed),))
    source = FactorSource(inputs=inputs, settings=RankSettings())
    reach, factor = source.reachability("prod", "shop",
                                        "pkg:maven/ch.qos.logback/logback-classic")
    assert reach == "unknown" and factor.value == "unknown" and factor.effect == 0.0
    assert factor.source == ("code.namespace ch.qos.logback.newthing.Widget on prod/shop names "
                             "only the group ch.qos.logback, not which of its artifacts runs")
    # A component the evidence names exactly is observed.
    observed = observed_components(evidence=[("code", "ch.qos.logback.classic.Logger", 5.0)])
    source = FactorSource(inputs=RankInputs(libraries=(ServiceLibraries(
        environment="prod", service="shop", traced=True, observed=observed),)),
        settings=RankSettings())
    assert source.reachability("prod", "shop", "pkg:maven/ch.qos.logback/logback-classic"
                               )[0] == "observed"
