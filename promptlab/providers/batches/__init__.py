"""Provider batches: an endpoint's requests sent through its provider's Batch API."""
