"""Synthetic but realistic OTLP spans built with the real opentelemetry-sdk encoder.

A small shop: the internet calls `frontend`, which calls `cart` (which uses Redis) and
`catalog` (which queries PostgreSQL through an internal repository span). Every export
request mixes the services, as an OpenTelemetry Collector's batch does. A span that ends in
error carries the `exception` event its instrumentation records, with a Python stack trace
through installed libraries (Django on the frontend, redis-py in the cart): the frames are
library evidence like `code.namespace`.
"""

from __future__ import annotations

import random
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

SPANS_PER_TRACE = 8

_SITE = "/usr/local/lib/python3.12/site-packages"
DJANGO_TRACE = f"""Traceback (most recent call last):
  File "{_SITE}/django/core/handlers/exception.py", line 55, in inner
    response = get_response(request)
  File "{_SITE}/django/core/handlers/base.py", line 197, in _get_response
    response = wrapped_callback(request, *callback_args, **callback_kwargs)
  File "/app/shop/frontend/views.py", line 41, in checkout
    cart = carts.get(request.session["cart"])
KeyError: 'cart'"""
REDIS_TRACE = f"""Traceback (most recent call last):
  File "/app/shop/cart/service.py", line 27, in GetCart
    raw = self.redis.hget(key, "items")
  File "{_SITE}/redis/commands/core.py", line 4960, in hget
    return self.execute_command("HGET", name, key)
  File "{_SITE}/redis/client.py", line 545, in execute_command
    conn = self.connection or pool.get_connection(command_name, **options)
  File "{_SITE}/redis/connection.py", line 1074, in get_connection
    connection.connect()
redis.exceptions.ConnectionError: Error 111 connecting to redis-cart:6379. Connection refused."""


def _exception(trace: str, type_: str, at: int) -> Event:
    return Event("exception", {"exception.type": type_, "exception.message": type_,
                               "exception.stacktrace": trace, "exception.escaped": "False"},
                 timestamp=at)


def _resource(name: str, env: str) -> Resource:
    return Resource.create(
        {"service.name": name, "deployment.environment.name": env, "service.version": "1.4.2",
         "k8s.namespace.name": "shop"}
    )


def build_spans(n_spans: int, *, env: str = "production", seed: int = 1,
                now_ns: int | None = None) -> list[ReadableSpan]:
    rng = random.Random(seed)
    now_ns = now_ns or time.time_ns()
    res = {name: _resource(name, env) for name in ("frontend", "cart", "catalog")}
    http = InstrumentationScope("opentelemetry.instrumentation.django", "0.48b0")
    grpc = InstrumentationScope("opentelemetry.instrumentation.grpc", "0.48b0")
    redis = InstrumentationScope("opentelemetry.instrumentation.redis", "0.48b0")
    pg = InstrumentationScope("opentelemetry.instrumentation.psycopg", "0.48b0")
    app = InstrumentationScope("shop.catalog", "2.0.0")
    spans: list[ReadableSpan] = []

    def ctx(trace_id: int) -> SpanContext:
        return SpanContext(trace_id, rng.getrandbits(64) | 1, is_remote=False,
                           trace_flags=TraceFlags(1))

    def add(name, context, parent, resource, scope, kind, start, dur, attrs=None, error=False,
            trace=None):
        events = [_exception(trace[0], trace[1], start + dur)] if error and trace else []
        spans.append(ReadableSpan(
            name=name, context=context, parent=parent, resource=resource,
            attributes=attrs or {}, kind=kind, events=events,
            status=Status(StatusCode.ERROR if error else StatusCode.UNSET),
            start_time=start, end_time=start + dur, instrumentation_scope=scope,
        ))

    while len(spans) < n_spans:
        trace_id = rng.getrandbits(128) | 1
        start = now_ns - rng.randrange(0, 50_000_000_000)
        root = ctx(trace_id)
        add("GET /checkout", root, None, res["frontend"], http, SpanKind.SERVER, start,
            rng.randrange(5_000_000, 80_000_000), {"url.scheme": "https", "http.route": "/checkout"},
            error=rng.random() < 0.01, trace=(DJANGO_TRACE, "KeyError"))
        c1 = ctx(trace_id)
        add("CartService/GetCart", c1, root, res["frontend"], grpc, SpanKind.CLIENT, start + 100_000,
            rng.randrange(1_000_000, 20_000_000), {"rpc.system": "grpc", "server.address": "cart"})
        s1 = ctx(trace_id)
        add("CartService/GetCart", s1, c1, res["cart"], grpc, SpanKind.SERVER, start + 200_000,
            rng.randrange(800_000, 15_000_000), {"rpc.system": "grpc"}, error=rng.random() < 0.02,
            trace=(REDIS_TRACE, "redis.exceptions.ConnectionError"))
        r1 = ctx(trace_id)
        add("HGET", r1, s1, res["cart"], redis, SpanKind.CLIENT, start + 300_000,
            rng.randrange(100_000, 2_000_000), {"db.system": "redis", "server.address": "redis-cart"})
        c2 = ctx(trace_id)
        add("CatalogService/List", c2, root, res["frontend"], grpc, SpanKind.CLIENT,
            start + 400_000, rng.randrange(1_000_000, 30_000_000),
            {"rpc.system": "grpc", "server.address": "catalog"})
        s2 = ctx(trace_id)
        add("CatalogService/List", s2, c2, res["catalog"], grpc, SpanKind.SERVER, start + 500_000,
            rng.randrange(900_000, 25_000_000), {"rpc.system": "grpc"})
        i2 = ctx(trace_id)
        add("ProductRepository.list", i2, s2, res["catalog"], app, SpanKind.INTERNAL,
            start + 600_000, rng.randrange(500_000, 20_000_000),
            {"code.namespace": "shop.catalog.repository", "code.function": "list"})
        q2 = ctx(trace_id)
        add("SELECT products", q2, i2, res["catalog"], pg, SpanKind.CLIENT, start + 700_000,
            rng.randrange(300_000, 10_000_000),
            {"db.system": "postgresql", "server.address": "catalog-db"})
    return spans[:n_spans]


def build_request_bytes(n_spans: int, **kwargs) -> bytes:
    return encode_spans(build_spans(n_spans, **kwargs)).SerializeToString()


def build_per_service_bytes(n_spans: int, **kwargs) -> list[bytes]:
    """The same spans as each service's own SDK exports them: one request per service, so
    every cross-service call has its two halves in different requests."""
    by_service: dict[str, list[ReadableSpan]] = {}
    for span in build_spans(n_spans, **kwargs):
        by_service.setdefault(str(span.resource.attributes["service.name"]), []).append(span)
    return [encode_spans(spans).SerializeToString() for spans in by_service.values()]
