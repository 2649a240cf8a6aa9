"""Loaders: a job's payload parsed and handed to domain services (`<kind>_load`)."""
