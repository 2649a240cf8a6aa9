"""The identity app's pages plus its upload page, which accepts evidence and so lives in
ingest (the identity app never imports ingest). Included by trustrank/urls.py in place of
trustrank.identity.urls, so the `identity:` route names stay as they were."""

from django.urls import path

from ingest import views
from trustrank.identity import urls as identity_urls

app_name = identity_urls.app_name
urlpatterns = [
    *identity_urls.urlpatterns,
    path("identities/upload/", views.certificates_upload_page, name="upload"),
]
