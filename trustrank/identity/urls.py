from django.urls import path

from trustrank.identity import views

app_name = "identity"
urlpatterns = [
    path("identities/", views.identities_page, name="identities"),
    path("identities/<int:pk>/", views.identity_page, name="identity"),
    path("identities/certificates/<int:pk>/", views.certificate_page, name="certificate"),
    path("identities/policies/", views.policies_page, name="policies"),
]
