"""`promptlab serve`: one process owns the database and the engine; clients use its API."""
