"""REST API for webhooks (scope `admin`): `/api/v1/webhooks` (list, add),
`/api/v1/webhooks/{id}` (read, change, remove) and `/api/v1/webhooks/{id}/deliveries`
(newest first). The secret is write-only; another team's webhook answers 404."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.principal import principal_for_request
from trustrank.lib.api import Pagination, problem
from trustrank.notify import selectors
from trustrank.notify.serializers import delivery_data, webhook_data
from trustrank.notify.services.webhooks import (
    WebhookInvalid,
    webhook_create,
    webhook_delete,
    webhook_update,
)

SCOPE = "admin"


def _invalid(exc: WebhookInvalid) -> Response:
    return problem(400, "Invalid webhook", str(exc), param=exc.param)


class WebhooksApi(APIView):
    """The team's webhooks (paginated), and adding one."""

    required_scope = SCOPE

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        hooks = selectors.webhook_list(principal=principal_for_request(request))
        paginator = Pagination()
        page = paginator.paginate_queryset(hooks.order_by("-created_at", "-id"), request,
                                           view=self)
        return paginator.get_paginated_response([webhook_data(h) for h in page or []])

    @extend_schema(request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        try:
            hook = webhook_create(principal=principal_for_request(request), data=request.data)
        except WebhookInvalid as exc:
            return _invalid(exc)
        return Response(webhook_data(hook), status=201,
                        headers={"Location": f"/api/v1/webhooks/{hook.pk}"})


class WebhookDetailApi(APIView):
    required_scope = SCOPE

    def _hook(self, request: Request, webhook_id: int) -> Any:
        return selectors.webhook_get_for_principal(
            principal=principal_for_request(request), webhook_id=webhook_id
        )

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, webhook_id: int) -> Response:
        return Response(webhook_data(self._hook(request, webhook_id)))

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def patch(self, request: Request, webhook_id: int) -> Response:
        hook = self._hook(request, webhook_id)
        try:
            hook = webhook_update(webhook=hook, data=request.data)
        except WebhookInvalid as exc:
            return _invalid(exc)
        return Response(webhook_data(hook))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, webhook_id: int) -> Response:
        webhook_delete(webhook=self._hook(request, webhook_id))
        return Response(status=204)


class WebhookDeliveriesApi(APIView):
    """The webhook's deliveries, newest first: status, response code, attempts, next retry."""

    required_scope = SCOPE

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, webhook_id: int) -> Response:
        hook = selectors.webhook_get_for_principal(
            principal=principal_for_request(request), webhook_id=webhook_id
        )
        paginator = Pagination()
        page = paginator.paginate_queryset(selectors.delivery_list(webhook=hook), request,
                                           view=self)
        return paginator.get_paginated_response([delivery_data(d) for d in page or []])
