"""What each function does behind its thin handler: the request and result models and the one call into adapters
and domain. A handler imports its task on the first invocation, so cold-start imports stay small."""
