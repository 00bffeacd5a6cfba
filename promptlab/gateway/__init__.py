"""The live gateway: prompt versions served to production, every call recorded once."""
