"""Django's admin, installed on a site whose sign-in is throttled (accounts/sites.py).

Its own module: apps.py may hold only the accounts app's config (Django picks the one
AppConfig subclass it finds there), and this one must not import models."""

from django.contrib.admin.apps import AdminConfig


class TrustRankAdminConfig(AdminConfig):
    default_site = "trustrank.accounts.sites.TrustRankAdminSite"
