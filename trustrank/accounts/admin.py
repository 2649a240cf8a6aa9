from django.contrib import admin

from trustrank.accounts.models import ApiKey, LoginFailure, Membership, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]


@admin.register(LoginFailure)
class LoginFailureAdmin(admin.ModelAdmin):
    list_display = ["at", "username", "address", "throttled"]
    list_filter = ["throttled"]
    search_fields = ["username", "address"]
    readonly_fields = ["at", "username", "address", "throttled"]
