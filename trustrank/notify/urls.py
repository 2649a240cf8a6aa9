from django.urls import path

from trustrank.notify import views

urlpatterns = [
    path("settings/webhooks/", views.webhooks_page, name="webhooks"),
    path("settings/webhooks/<int:webhook_id>/", views.webhook_page, name="webhook"),
    path(
        "settings/webhooks/<int:webhook_id>/deliveries/",
        views.webhook_deliveries_fragment,
        name="webhook-deliveries",
    ),
    path(
        "settings/webhooks/<int:webhook_id>/<slug:action>/",
        views.webhook_action,
        name="webhook-action",
    ),
]
