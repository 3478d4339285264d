"""Local execution layer: synthesize the CDK app once, stand its resources up on moto, run its workflow.

- :mod:`dualtrack.local.synth`: synthesize the app into a cache keyed by the sources (``synthesize``).
- :mod:`dualtrack.local.template`: read the synthesized templates and create buckets, tables, queues, job
  definitions, functions and the state machine through moto's APIs (``deploy_locally``).
- :mod:`dualtrack.local.moto_shims`: the few moto behaviours the workflow needs that moto 5.2.5 lacks
  (``moto_shims``), each with a test that fails once moto fixes it.
"""
