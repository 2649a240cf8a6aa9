from django.urls import path

from trustrank.notify import apis

urlpatterns = [
    path("webhooks", apis.WebhooksApi.as_view(), name="api-webhooks"),
    path("webhooks/<int:webhook_id>", apis.WebhookDetailApi.as_view(), name="api-webhook"),
    path(
        "webhooks/<int:webhook_id>/deliveries",
        apis.WebhookDeliveriesApi.as_view(),
        name="api-webhook-deliveries",
    ),
]
