"""Client for a deployed dualtrack API: endpoint discovery, SigV4-signed requests with retries, plain-text views."""
