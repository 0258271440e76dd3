"""Several boxes: a campaign of every study on every model, and the same spread over a Ray cluster."""
