from django.urls import path

from trustrank.gate import views

app_name = "gate"

urlpatterns = [
    path("settings/gate/", views.gate_policy_page, name="policy"),
]
