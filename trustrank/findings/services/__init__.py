"""Write services of the findings app: audit events, reconciliation from evidence, triage."""
