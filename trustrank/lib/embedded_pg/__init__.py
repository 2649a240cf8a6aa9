"""PostgreSQL backend for the embedded server: started by the first connection."""
