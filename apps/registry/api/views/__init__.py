"""The registry's API views, one module per resource (models, versions, aliases, webhooks,
lineage)."""
