"""The trial report as a typed model (``model``) and how it is built from the evidence (``build``, with its track
records, acceptance checks, stages, decision, scaling and pilot sections). Rendering lives in ``lambdas.rendering``."""
