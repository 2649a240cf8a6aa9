// Service map: draws the environment's call graph (embedded as JSON by the page) with
// cytoscape.js. Pan and zoom are cytoscape's own; a click on a service opens its page.
// Services are coloured by trust and exposed (open) ones outlined, from the page's data.
(function () {
  "use strict";
  var container = document.getElementById("service-map");
  var dataNode = document.getElementById("service-graph");
  if (!container || !dataNode || typeof window.cytoscape !== "function") { return; }
  var graph = JSON.parse(dataNode.textContent);
  var maxRate = 1;
  graph.edges.forEach(function (e) { maxRate = Math.max(maxRate, e.per_minute || e.calls || 0); });
  var elements = [];
  graph.nodes.forEach(function (n) {
    var data = { id: n.id, label: n.label, kind: n.kind, url: n.url,
      ingress: n.ingress ? "yes" : "no", exposure: n.exposure || "unknown",
      untraced: n.untraced ? "yes" : "no" };
    // Trust from the latest ranking run (0-1); a node without it keeps the plain colour.
    if (typeof n.trust === "number") {
      data.trust = n.trust;
      data.label = n.label + " (" + n.trust.toFixed(2) + ")";
    }
    elements.push({ group: "nodes", data: data });
  });
  graph.edges.forEach(function (e) {
    var rate = e.per_minute || e.calls || 0;
    // Width grows with the logarithm of the call rate so one busy edge does not hide the rest.
    var width = 1 + 9 * Math.log1p(rate) / Math.log1p(maxRate);
    var label = (e.per_minute !== null ? e.per_minute + "/min" : e.calls + " calls") +
      (e.errors ? ", " + e.errors + " err" : "");
    elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target,
      width: width, label: label, errors: e.errors, tls: e.tls ? "yes" : "no" } });
  });
  function layoutOptions(g) {
    var roots = g.nodes.filter(function (n) { return n.kind === "internet"; })
      .map(function (n) { return "#" + n.id; });
    var options = { name: "breadthfirst", directed: true, padding: 30, spacingFactor: 1.2 };
    if (roots.length) { options.roots = roots.join(","); }
    return options;
  }
  var cy = window.cytoscape({
    container: container,
    elements: elements,
    wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: { "label": "data(label)", "background-color": "#2956b2",
        "color": "#1d2433", "font-size": 11, "text-valign": "bottom", "text-margin-y": 4,
        "width": 28, "height": 28 } },
      { selector: "node[kind = 'external']", style: { "background-color": "#8a93a6",
        "shape": "round-rectangle" } },
      { selector: "node[kind = 'internet']", style: { "background-color": "#b3261e",
        "shape": "diamond", "width": 36, "height": 36 } },
      { selector: "node[trust >= 0]", style: {
        "background-color": "mapData(trust, 0, 1, #d9480f, #1f7a3a)" } },
      { selector: "node[ingress = 'yes']", style: { "border-width": 6, "border-style": "double",
        "border-color": "#1f7a3a" } },
      { selector: "node[exposure = 'open']", style: { "border-width": 4,
        "border-color": "#b3261e" } },
      { selector: "node[exposure = 'open'][ingress = 'yes']", style: { "border-width": 6 } },
      // Declared by a deployment, no traces: no calls to draw, so an isolated node.
      { selector: "node[untraced = 'yes']", style: { "border-width": 3,
        "border-style": "dashed", "border-color": "#5b6478" } },
      { selector: "edge", style: { "width": "data(width)", "curve-style": "bezier",
        "target-arrow-shape": "triangle", "line-color": "#9aa6bd",
        "target-arrow-color": "#9aa6bd", "label": "data(label)", "font-size": 9,
        "color": "#5b6478", "text-background-color": "#ffffff",
        "text-background-opacity": 0.85, "text-background-padding": 2 } },
      { selector: "edge[errors > 0]", style: { "line-color": "#d98b84",
        "target-arrow-color": "#d98b84" } },
      { selector: "edge[tls = 'yes']", style: { "line-style": "solid" } },
      { selector: "edge[tls = 'no']", style: { "line-style": "dashed" } }
    ],
    layout: layoutOptions(graph)
  });
  cy.on("tap", "node", function (evt) {
    var url = evt.target.data("url");
    if (url) { window.location.href = url; }
  });
  window.serviceMap = cy;
})();
