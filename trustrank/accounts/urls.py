from django.contrib.auth import views as auth_views
from django.urls import path

from trustrank.accounts import views

urlpatterns = [
    # Public: browsers ask for it on every site, signed in or not.
    path("favicon.ico", views.favicon, name="favicon"),
    path("login/", views.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("settings/keys/", views.api_keys_page, name="api-keys"),
    path("settings/keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
]
