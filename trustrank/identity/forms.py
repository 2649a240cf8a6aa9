"""Forms of the identity pages: input validation only; the services do the work."""

from __future__ import annotations

from django import forms


class CertificateUploadForm(forms.Form):
    file = forms.FileField(help_text="PEM (one or many certificates, chains included) or DER")
    environment = forms.CharField(max_length=64, initial="default")
    service = forms.CharField(max_length=200, required=False)
    namespace = forms.CharField(max_length=200, required=False)
    observed = forms.CharField(max_length=500, required=False, label="Where observed")
    team = forms.CharField(max_length=120, required=False, help_text="if you are in several teams")


class TrustBundleUploadForm(forms.Form):
    file = forms.FileField(help_text="PEM CA certificates or a SPIFFE bundle (JWKS JSON)")
    environment = forms.CharField(max_length=64, initial="default")
    trust_domain = forms.CharField(max_length=255, required=False)
    team = forms.CharField(max_length=120, required=False, help_text="if you are in several teams")


class MappingForm(forms.Form):
    service_name = forms.CharField(
        max_length=200, required=False, help_text="empty: go back to the mapping rule"
    )
    namespace = forms.CharField(max_length=200, required=False)


class PolicyForm(forms.Form):
    environment = forms.CharField(max_length=64, initial="default")
    service_name = forms.CharField(max_length=200)
    namespace = forms.CharField(max_length=200, required=False)
    allowed_callers = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        help_text="one SPIFFE ID or glob pattern per line, e.g. spiffe://prod.example/ns/web/*",
    )
    require_mtls = forms.BooleanField(required=False, label="Require mTLS")
    team = forms.CharField(max_length=120, required=False, help_text="if you are in several teams")

    def clean_allowed_callers(self) -> list[str]:
        raw = self.cleaned_data.get("allowed_callers") or ""
        return [line.strip() for line in raw.splitlines() if line.strip()]
