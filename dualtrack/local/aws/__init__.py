"""The AWS the local runtime stands the app up on: moto, and what the runtime adds so it behaves as AWS would.

- :mod:`dualtrack.local.aws.moto_shims`: the few moto behaviours the workflow needs that moto 5.2.5 lacks
  (``moto_shims``), each with a test that fails once moto fixes it.
- :mod:`dualtrack.local.aws.template`: the template deployer: read the synthesized templates and create buckets,
  tables, queues, job definitions, functions and the state machine through moto's APIs (``deploy_locally``).
- :mod:`dualtrack.local.aws.session_policies`: the IAM session policies: S3 access of tagged role sessions held to
  the role's policy (``enforce_session_policies``), which moto does not check.
- :mod:`dualtrack.local.aws.event_router`: the event router: EventBridge events delivered to Lambda targets
  in-process, asynchronously, with retries and a dead-letter queue (``EventRouter``).
- :mod:`dualtrack.local.aws.network`: the network rules: the VPC the templates build and what a job in it may reach
  (``VpcModel``, ``JobNetwork``).
- :mod:`dualtrack.local.aws.tables`: the tables: the stage's DynamoDB tables for the tests and benchmarks that stand
  them up without synthesizing (``create_tables``).
"""
