"""Pure vulnerability-matching engine: purls to OSV packages, OSV range evaluation, CVSS.

Nothing here imports Django or the ORM; the services feed it plain data.
"""
