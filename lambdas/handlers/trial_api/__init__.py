"""The trial API's routers (one per resource) and their request and response models; the function that serves
them, with its error mapping, is ``lambdas.handlers.on_trial_api``."""
