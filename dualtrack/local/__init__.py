"""Local execution layer: stand the synthesized CDK app's resources up on moto, run its workflow.

The app is synthesized once per source state by :mod:`infra.synth` (``synthesize``, cached by source hash).

- :mod:`dualtrack.local.aws`: the AWS emulation: the moto shims, the template deployer (``deploy_locally``), the
  IAM session policies, the event router, the network rules and the tables.
- :mod:`dualtrack.local.rehearsal`: the rehearsal end to end (``Rehearsal``), on the loopback AWS of
  :mod:`dualtrack.local.server`.
- :mod:`dualtrack.local.batch_runner`: Batch jobs run as local processes (``LocalBatch``): attempts, retries,
  timeouts and status transitions; :mod:`dualtrack.local.dockerfile` reads what an image's container runs from its
  Dockerfile (``parse_dockerfile``), :mod:`dualtrack.local.processes` starts and stops the nodes' processes.
- :mod:`dualtrack.local.plane_load`: many trials' events through the ledger path at once, on moto (``simulate``).
"""
