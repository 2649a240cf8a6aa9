"""Packages a CycloneDX component names for itself (properties and evidence), JSON and XML."""

from __future__ import annotations

import orjson

from trustrank.parsers.cyclonedx import parse_cyclonedx


def test_json_components_name_their_packages():
    doc = {"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1, "components": [
        {"type": "library", "name": "h2", "group": "com.h2database", "version": "2.2.224",
         "purl": "pkg:maven/com.h2database/h2@2.2.224",
         "properties": [{"name": "Namespaces",
                         "value": "org.h2.Driver\norg.h2.jdbc.JdbcConnection\norg.h2.jdbc.JdbcStatement"}]},
        {"type": "library", "name": "billing", "purl": "pkg:maven/com.shop/billing@1",
         "properties": [{"name": "trustrank:packages", "value": "com.shop.billing, com.shop.tax"}],
         "evidence": {
             "occurrences": [{"location": "app.jar!/BOOT-INF/classes/com/shop/ledger/Entry.class"}],
             "callstack": {"frames": [{"package": "com.shop.invoices", "module": "Invoice",
                                       "function": "total"}]}}},
        {"type": "library", "name": "plain", "purl": "pkg:maven/g/plain@1"},
    ]}
    parsed = parse_cyclonedx(orjson.dumps(doc))
    packages = {c.name: c.packages for c in parsed.components}
    assert packages["h2"] == ("org.h2",)  # org.h2.jdbc is under org.h2
    assert packages["billing"] == ("com.shop.billing", "com.shop.invoices", "com.shop.ledger",
                                   "com.shop.tax")
    assert packages["plain"] == ()


def test_xml_components_name_their_packages():
    xml = b"""<?xml version="1.0"?>
<bom xmlns="http://cyclonedx.org/schema/bom/1.6" version="1">
  <components>
    <component type="library">
      <name>h2</name><version>2.2.224</version><purl>pkg:maven/com.h2database/h2@2.2.224</purl>
      <properties><property name="Namespaces">org.h2.jdbc.JdbcConnection</property></properties>
      <evidence><occurrences><occurrence><location>org/h2/mvstore/MVStore.class</location></occurrence></occurrences></evidence>
    </component>
  </components>
</bom>"""
    (component,) = parse_cyclonedx(xml).components
    assert component.packages == ("org.h2.jdbc", "org.h2.mvstore")
