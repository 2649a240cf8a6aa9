"""trustrank.identity.engine: chain verification (checked against `openssl verify`),
strength, mapping, call-edge strength, caller policy and findings. Pure: no database."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.identity.pki import (
    Issued,
    data,
    issue,
    make_pki,
    now,
    openssl_verify,
    rsa_key,
    sha1_leaf,
)
from trustrank.identity import engine
from trustrank.identity.engine import ChainStatus, chain_verify
from trustrank.parsers.x509 import ParsedCertificate, certificates_parse


def parsed(*items: Issued) -> list[ParsedCertificate]:
    return certificates_parse(b"".join(i.pem for i in items))


def verify(leaf: Issued, *, inters: tuple[Issued, ...], anchors: tuple[Issued, ...],
           at: dt.datetime | None = None) -> engine.VerificationResult:
    return chain_verify(
        leaf=parsed(leaf)[0],
        intermediates=parsed(*inters) if inters else [],
        anchors=parsed(*anchors) if anchors else [],
        at=at or now(),
    )


def agree_with_openssl(leaf: Issued, *, inters: tuple[Issued, ...], anchors: tuple[Issued, ...],
                       at: dt.datetime | None = None) -> engine.VerificationResult:
    """Our verdict and openssl's must match (valid vs not valid)."""
    ours = verify(leaf, inters=inters, anchors=anchors, at=at)
    theirs, output = openssl_verify(
        leaf=leaf.pem,
        anchors=b"".join(a.pem for a in anchors),
        intermediates=b"".join(i.pem for i in inters),
        attime=at,
    )
    assert ours.is_valid == theirs, (ours, output)
    return ours


def test_valid_spiffe_chain_matches_openssl_and_records_the_path() -> None:
    pki = make_pki()
    leaf = pki.leaf("/ns/pay/sa/payments")
    result = agree_with_openssl(leaf, inters=(pki.intermediate,), anchors=(pki.root,))
    assert result.status == ChainStatus.VALID
    assert [p.role for p in result.path] == ["leaf", "intermediate", "anchor"]
    assert result.path[1].subject.startswith("CN=Intermediate CA")


def test_expired_leaf() -> None:
    pki = make_pki()
    start = now() - dt.timedelta(days=40)
    leaf = pki.leaf("/old", not_before=start, not_after=start + dt.timedelta(days=10))
    result = agree_with_openssl(leaf, inters=(pki.intermediate,), anchors=(pki.root,))
    assert result.status == ChainStatus.EXPIRED
    assert "expired on" in result.reason


def test_not_yet_valid_leaf() -> None:
    pki = make_pki()
    leaf = pki.leaf("/future", not_before=now() + dt.timedelta(days=2))
    result = agree_with_openssl(leaf, inters=(pki.intermediate,), anchors=(pki.root,))
    assert result.status == ChainStatus.NOT_YET_VALID


def test_validity_is_checked_at_the_given_time() -> None:
    pki = make_pki()
    leaf = pki.leaf("/svc", days=30)
    later = now() + dt.timedelta(days=60)
    assert verify(leaf, inters=(pki.intermediate,), anchors=(pki.root,), at=later).status == (
        ChainStatus.EXPIRED
    )


def test_wrong_issuer_is_untrusted() -> None:
    pki, other = make_pki(), make_pki("evil.example")
    # Claims the real trust domain, issued by another CA.
    forged = issue("forged", issuer=other.intermediate, uris=("spiffe://prod.example/ns/pay/sa/payments",))
    result = agree_with_openssl(forged, inters=(other.intermediate,), anchors=(pki.root,))
    assert result.status == ChainStatus.UNTRUSTED
    assert "unknown issuer" in result.reason


def test_same_issuer_name_but_wrong_key_is_invalid() -> None:
    pki = make_pki()
    # Same name as the real intermediate, its own key: names match, signatures do not.
    impostor_ca = issue("Intermediate CA prod.example", issuer=None, ca=True)
    leaf = issue("x", issuer=impostor_ca, uris=("spiffe://prod.example/x",))
    result = agree_with_openssl(leaf, inters=(pki.intermediate,), anchors=(pki.root,))
    assert not result.is_valid


def test_missing_intermediate_is_untrusted() -> None:
    pki = make_pki()
    result = agree_with_openssl(pki.leaf("/a"), inters=(), anchors=(pki.root,))
    assert result.status == ChainStatus.UNTRUSTED


def test_intermediate_without_ca_flag_is_invalid() -> None:
    pki = make_pki()
    not_ca = issue("Not a CA", issuer=pki.root, ca=False, key_usage=False)
    leaf = issue("x", issuer=not_ca, uris=("spiffe://prod.example/x",))
    result = agree_with_openssl(leaf, inters=(not_ca,), anchors=(pki.root,))
    assert result.status == ChainStatus.INVALID
    assert "cA" in result.reason


def test_path_length_is_enforced() -> None:
    pki = make_pki()  # intermediate has pathlen 0
    sub = issue("Sub CA", issuer=pki.intermediate, ca=True)
    leaf = issue("x", issuer=sub, uris=("spiffe://prod.example/x",))
    result = agree_with_openssl(leaf, inters=(pki.intermediate, sub), anchors=(pki.root,))
    assert result.status == ChainStatus.INVALID
    assert "path length" in result.reason


def test_expired_intermediate_invalidates_the_chain() -> None:
    pki = make_pki()
    start = now() - dt.timedelta(days=30)
    old = issue("Old CA", issuer=pki.root, ca=True, path_length=0, not_before=start,
                not_after=start + dt.timedelta(days=5))
    leaf = issue("x", issuer=old, uris=("spiffe://prod.example/x",))
    result = agree_with_openssl(leaf, inters=(old,), anchors=(pki.root,))
    assert result.status == ChainStatus.INVALID


def test_self_signed_leaf() -> None:
    pki = make_pki()
    selfie = issue("selfie", uris=("spiffe://prod.example/ns/pay/sa/payments",))
    result = agree_with_openssl(selfie, inters=(), anchors=(pki.root,))
    assert result.status == ChainStatus.SELF_SIGNED


def test_no_bundle_means_untrusted() -> None:
    pki = make_pki()
    result = verify(pki.leaf("/a"), inters=(pki.intermediate,), anchors=())
    assert result.status == ChainStatus.UNTRUSTED
    assert "no trust bundle" in result.reason


def test_svid_leaf_that_can_sign_certificates_is_invalid() -> None:
    """X509-SVID rule: a leaf SVID must not have keyCertSign."""
    pki = make_pki()
    leaf = issue("signer", issuer=pki.intermediate, cert_sign=True,
                 uris=("spiffe://prod.example/x",))
    result = verify(leaf, inters=(pki.intermediate,), anchors=(pki.root,))
    assert result.status == ChainStatus.INVALID
    assert "keyCertSign" in result.reason


def test_uploaded_ca_certificate_verifies_as_a_ca() -> None:
    pki = make_pki()
    result = agree_with_openssl(pki.intermediate, inters=(), anchors=(pki.root,))
    assert result.status == ChainStatus.VALID


def test_sha1_signature_is_refused_like_openssl_at_security_level_1() -> None:
    root = issue("RSA Root", ca=True, path_length=1, key=rsa_key(2048))
    leaf_pem = sha1_leaf(root, "spiffe://prod.example/legacy")
    (leaf,) = certificates_parse(leaf_pem)
    at = now() + dt.timedelta(minutes=5)
    result = chain_verify(leaf=leaf, intermediates=[], anchors=parsed(root), at=at)
    assert result.status == ChainStatus.INVALID
    assert "SHA-1" in result.reason
    ok, output = openssl_verify(leaf=leaf_pem, anchors=root.pem, attime=at,
                                extra=("-auth_level", "1"))
    assert not ok, output


def test_real_badssl_chain_against_a_real_mozilla_root() -> None:
    """A real Web PKI chain (badssl.com, COMODO) against the real root from certifi, at a
    time it was valid and today (expired), both times in agreement with openssl."""
    chain_pem = data("badssl.com_subdomain-no-common-name.pem")
    root_pem = data("certifi_comodo-rsa-certification-authority.pem")
    leaf, *inters = certificates_parse(chain_pem)
    anchors = certificates_parse(root_pem)
    leaf_pem = chain_pem.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n"
    for at, valid in ((dt.datetime(2019, 1, 1, tzinfo=dt.UTC), True), (now(), False)):
        ours = chain_verify(leaf=leaf, intermediates=inters, anchors=anchors, at=at)
        theirs, output = openssl_verify(
            leaf=leaf_pem, anchors=root_pem, intermediates=chain_pem, attime=at
        )
        assert ours.is_valid is valid, ours
        assert theirs is valid, output
    ours = chain_verify(leaf=leaf, intermediates=inters, anchors=anchors,
                        at=dt.datetime(2019, 1, 1, tzinfo=dt.UTC))
    assert [p.role for p in ours.path] == ["leaf", "intermediate", "anchor"]
    assert ours.path[-1].subject.startswith("CN=COMODO RSA Certification Authority")


# --- strength -------------------------------------------------------------------------------

RULES = engine.StrengthRules()


def strength(status: str, *, spiffe: bool = True, known: bool = True, weak: tuple = ()) -> int:
    return engine.certificate_strength(
        status=status, spiffe_id="spiffe://td/x" if spiffe else None,
        trust_domain_known=known, weaknesses=weak, rules=RULES,
    ).value


def test_strength_table() -> None:
    assert strength(ChainStatus.VALID) == 100
    assert strength(ChainStatus.VALID, spiffe=False) == 70
    assert strength(ChainStatus.VALID, known=False) == 30
    assert strength(ChainStatus.SELF_SIGNED) == 30
    assert strength(ChainStatus.UNTRUSTED) == 30
    for bad in (ChainStatus.EXPIRED, ChainStatus.NOT_YET_VALID, ChainStatus.INVALID):
        assert strength(bad) == 0


def test_weak_key_and_signature_lower_strength() -> None:
    pki = make_pki()
    weak_leaf = parsed(issue("weak", issuer=pki.intermediate, key=rsa_key(1024)))[0]
    weaknesses = engine.certificate_weaknesses(weak_leaf, RULES)
    assert [w.kind for w in weaknesses] == ["weak_key"]
    assert "RSA key of 1024 bits" in weaknesses[0].detail
    assert strength(ChainStatus.VALID, weak=weaknesses) == 60
    both = (*weaknesses, engine.Weakness("weak_signature", "sha1"))
    assert strength(ChainStatus.VALID, weak=both) == 20
    assert strength(ChainStatus.SELF_SIGNED, weak=both) == 0  # never below zero


def test_sha1_is_a_weak_signature() -> None:
    root = issue("RSA Root", ca=True, key=rsa_key(2048))
    (leaf,) = certificates_parse(sha1_leaf(root, "spiffe://td/legacy"))
    assert [w.kind for w in engine.certificate_weaknesses(leaf, RULES)] == ["weak_signature"]


def test_strength_rules_are_configurable() -> None:
    rules = engine.StrengthRules.from_mapping({"valid_no_spiffe": 50, "weak_key_penalty": 10})
    assert rules.valid_no_spiffe == 50 and rules.weak_key_penalty == 10
    with pytest.raises(ValueError, match="unknown identity strength setting"):
        engine.StrengthRules.from_mapping({"bogus": 1})


# --- mapping --------------------------------------------------------------------------------


def test_default_mapping_rules() -> None:
    rules = engine.MappingRules.compile()
    assert engine.identity_map("spiffe://td/ns/pay/sa/payments", rules) == engine.ServiceRef(
        "payments", "pay"
    )
    assert engine.identity_map("spiffe://td/checkout", rules) == engine.ServiceRef("checkout")
    assert engine.identity_map("spiffe://td/region/eu/cart", rules) == engine.ServiceRef("cart")
    assert engine.identity_map("spiffe://example.org/spire/agent/join_token/x", rules) is None


def test_mapping_rules_are_configurable() -> None:
    rules = engine.MappingRules.compile([r"^/svc/(?P<service>[^/]+)$"], [])
    assert engine.identity_map("spiffe://td/svc/a", rules) == engine.ServiceRef("a")
    assert engine.identity_map("spiffe://td/other/a", rules) is None
    with pytest.raises(ValueError, match="service"):
        engine.MappingRules.compile([r"^/(?P<name>.*)$"])


# --- call edges -----------------------------------------------------------------------------


def test_edge_strength_both_one_none() -> None:
    a = engine.EndpointEvidence(mtls=True, spiffe_id="spiffe://td/a", strength=100)
    b = engine.EndpointEvidence(mtls=True, spiffe_id="spiffe://td/b", strength=70)
    plain = engine.EndpointEvidence(mtls=False)
    both = engine.edge_identity_strength(caller=a, callee=b)
    assert (both.kind, both.value) == ("mutual", 70)
    one = engine.edge_identity_strength(caller=a, callee=plain)
    assert (one.kind, one.value) == ("one_side", 50)
    callee_only = engine.edge_identity_strength(caller=None, callee=b)
    assert (callee_only.kind, callee_only.value) == ("one_side", 35)
    none = engine.edge_identity_strength(caller=plain, callee=None)
    assert (none.kind, none.value) == ("none", 0)
    forged = engine.EndpointEvidence(mtls=True, spiffe_id="spiffe://td/a", strength=0)
    assert engine.edge_identity_strength(caller=forged, callee=b).kind == "one_side"


# --- policy ---------------------------------------------------------------------------------


def test_caller_allow_list_globs() -> None:
    patterns = ["spiffe://td/ns/web/*", "spiffe://td/ns/ops/sa/cron"]
    assert engine.caller_allowed("spiffe://td/ns/web/sa/frontend", patterns)
    assert engine.caller_allowed("spiffe://td/ns/ops/sa/cron", patterns)
    assert not engine.caller_allowed("spiffe://td/ns/ops/sa/other", patterns)
    assert not engine.caller_allowed(None, patterns)
    assert engine.caller_allowed(None, [])


def test_policy_violations() -> None:
    policy = engine.CallerPolicy("payments", allowed_callers=("spiffe://td/ns/web/*",),
                                 require_mtls=True)
    ok = engine.ObservedEdge("frontend", "payments", "spiffe://td/ns/web/sa/frontend", True)
    assert engine.edge_policy_violations(ok, policy) == []
    stranger = engine.ObservedEdge("batch", "payments", "spiffe://td/ns/ops/sa/batch", True)
    assert "not in payments's allow-list" in engine.edge_policy_violations(stranger, policy)[0]
    plain = engine.ObservedEdge("frontend", "payments", None, False)
    assert len(engine.edge_policy_violations(plain, policy)) == 2


# --- findings -------------------------------------------------------------------------------


def facts(**overrides: object) -> engine.CertificateFacts:
    base: dict[str, object] = {
        "fingerprint_sha256": "ab" * 32, "subject": "CN=x", "spiffe_id": "spiffe://td/x",
        "role": "leaf", "not_after": now() + dt.timedelta(days=200),
        "chain_status": ChainStatus.VALID, "chain_reason": "", "weaknesses": (),
    }
    base.update(overrides)
    return engine.CertificateFacts(**base)  # type: ignore[arg-type]


def kinds(f: engine.CertificateFacts, window_days: int = 30) -> list[str]:
    return [s.kind for s in engine.certificate_findings(
        f, now=now(), expiry_window=dt.timedelta(days=window_days))]


def test_certificate_findings() -> None:
    assert kinds(facts()) == []
    assert kinds(facts(not_after=now() + dt.timedelta(days=10))) == ["expiring"]
    assert kinds(facts(not_after=now() + dt.timedelta(days=10)), window_days=5) == []
    assert kinds(facts(not_after=now() - dt.timedelta(days=1),
                       chain_status=ChainStatus.EXPIRED)) == ["expired"]
    assert kinds(facts(chain_status=ChainStatus.UNTRUSTED, chain_reason="unknown issuer")) == [
        "chain_invalid"
    ]
    weak = (engine.Weakness("weak_key", "RSA 1024"), engine.Weakness("weak_signature", "SHA-1"))
    assert kinds(facts(weaknesses=weak)) == ["weak_key", "weak_signature"]
